import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = new URL('../../', import.meta.url); // test/dist/ → repo root
const CHECK = fileURLToPath(new URL('scripts/check-node.cjs', ROOT));
const check = (version: string) => spawnSync(process.execPath, [CHECK, version], { encoding: 'utf8' });

test('node version - Node 20 stops npm test and npm run demo at once with one line naming 22.12 and how to get it', () => {
  const r = check('20.19.0');
  assert.equal(r.status, 1);
  assert.equal(r.stdout, '');
  const lines = r.stderr.trimEnd().split('\n');
  assert.equal(lines.length, 1, r.stderr);
  assert.match(lines[0] ?? '', /Node\.js 20\.19\.0 is too old: Ferry needs Node\.js >= 22\.12/);
  assert.match(lines[0] ?? '', /nvm install.*\.nvmrc/);
  for (const v of ['22.11.0', 'v18.20.4']) assert.equal(check(v).status, 1, v);
  for (const v of ['22.12.0', '22.23.5', '24.1.0', process.versions.node]) assert.equal(check(v).status, 0, v);
});

test('node version - the check runs before the build in npm test and npm run demo, and npm install refuses old engines', () => {
  const pkg = JSON.parse(readFileSync(new URL('package.json', ROOT), 'utf8')) as {
    scripts: Record<string, string>;
    engines: { node: string };
  };
  for (const script of ['test', 'demo'])
    assert.match(pkg.scripts[script] ?? '', /^node scripts\/check-node\.cjs && tsc --build && /, script);
  assert.equal(pkg.engines.node, '>=22.12.0');
  assert.match(readFileSync(new URL('.npmrc', ROOT), 'utf8'), /^engine-strict=true$/m);
  assert.match(readFileSync(new URL('.nvmrc', ROOT), 'utf8'), /^22\b/);
});
