import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { test } from 'node:test';
import { grantsSql } from '@ferry/core';

const ROOT = new URL('../../', import.meta.url); // test/dist/ → repo root
const SAMPLES = new URL('apps/example/src/samples/', ROOT);
const DOCS = ['docs/operations.md', 'docs/failure-modes.md', 'docs/inbox-modes.md'];
const samples = new Map(readdirSync(SAMPLES).map((f) => [f, readFileSync(new URL(f, SAMPLES), 'utf8').trim()]));
const read = (doc: string) => readFileSync(new URL(doc, ROOT), 'utf8');
const blocks = (doc: string, lang: string) =>
  [...read(doc).matchAll(new RegExp(`\`\`\`${lang}\\n([\\s\\S]*?)\`\`\``, 'g'))].map((m) => (m[1] ?? '').trim());

test('docs - every TypeScript sample in the operations docs is a compiled file of apps/example/src/samples, verbatim', () => {
  const used = new Set<string>();
  for (const doc of DOCS) {
    for (const block of blocks(doc, 'ts')) {
      const file = [...samples].find(([, text]) => text === block)?.[0];
      assert.ok(file, `${doc}: a sample is not a copy of any file in apps/example/src/samples:\n${block.slice(0, 300)}`);
      assert.ok(existsSync(new URL(`apps/example/dist/samples/${file.replace(/\.ts$/, '.js')}`, ROOT)), `${file} was compiled`);
      used.add(file);
    }
  }
  assert.deepEqual([...used].sort(), [...samples.keys()].sort(), 'every sample file appears in a doc');
});

test('docs - every relative link in the operations docs and the READMEs points to a file that exists, and every anchor to a heading', () => {
  const slug = (h: string) =>
    h
      .toLowerCase()
      .replace(/[`*_]/g, '')
      .replace(/[^a-z0-9 -]/g, '')
      .trim()
      .replace(/ /g, '-');
  const gettingStarted = ['README.md', 'docs/quick-start.md', 'apps/relay/README.md'].concat(
    ['core', 'publisher', 'inbox', 'idempotency'].map((p) => `packages/${p}/README.md`),
  );
  for (const doc of [...DOCS, 'docs/configuration.md', 'deploy/README.md', ...gettingStarted]) {
    const base = new URL(doc, ROOT);
    for (const m of read(doc).matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1] ?? '';
      if (/^[a-z]+:/.test(target)) continue;
      const [path, anchor] = target.split('#');
      const file = path ? new URL(path, base) : base;
      assert.ok(existsSync(file), `${doc}: link ${target} points to a missing file`);
      if (anchor && file.pathname.endsWith('.md')) {
        const headings = [...readFileSync(file, 'utf8').matchAll(/^#+ (.+)$/gm)].map((h) => slug(h[1] ?? ''));
        assert.ok(headings.includes(anchor), `${doc}: link ${target}: no heading "${anchor}" in ${path || doc}`);
      }
    }
  }
});

test('docs - the runbook names every relay metric and every operator command', () => {
  const ops = read('docs/operations.md');
  const metrics = read('apps/relay/src/daemon/metrics.ts');
  const names = [...metrics.matchAll(/name: '(ferry_[a-z_]+)'/g)].map((m) => m[1] ?? '');
  assert.ok(names.length >= 10);
  const documented = `${ops}\n${read('docs/relay.md')}`;
  for (const n of names) assert.ok(documented.includes(n), `${n} is documented`);
  for (const c of ['ferry status', 'ferry doctor', 'ferry verify', 'ferry dlq', 'ferry replay', 'ferry inbox parked'])
    assert.ok(ops.includes(c), c);
  for (const s of ['idle_in_transaction_session_timeout', 'autovacuum', 'R3', '--lanes']) assert.ok(ops.includes(s), s);
});

test('docs - security.md shows exactly what --print-grants prints (the publish functions take 12 arguments)', () => {
  const shown = blocks('docs/security.md', 'sql').find((b) => b.includes('GRANT EXECUTE ON FUNCTION'));
  assert.ok(shown, 'security.md has the grants block');
  const printed = [
    grantsSql({ role: 'ferry_publisher', for: 'publisher' }),
    grantsSql({ role: 'ferry_relay', for: 'relay' }),
    grantsSql({ role: 'billing_inbox', for: 'inbox', consumers: ['billing'] }),
    grantsSql({ role: 'ferry_idempotency', for: 'idempotency' }),
    grantsSql({ role: 'ferry_reader', for: 'reader' }),
    grantsSql({ role: 'ferry_console', for: 'console' }),
  ]
    .join('\n')
    .trim();
  assert.equal(shown, printed);
});
