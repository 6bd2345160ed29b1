import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { test } from 'node:test';

const ROOT = new URL('../../', import.meta.url); // test/dist/ → repo root
const EXAMPLES = new URL('packages/idempotency/src/examples/', ROOT);
const examples = new Map(readdirSync(EXAMPLES).map((f) => [f, readFileSync(new URL(f, EXAMPLES), 'utf8').trim()]));
const tsBlocks = (doc: string) =>
  [...readFileSync(new URL(doc, ROOT), 'utf8').matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => (m[1] ?? '').trim());

test('idempotency - every TypeScript sample in the docs is a compiled example file, verbatim', () => {
  const used = new Set<string>();
  for (const doc of ['docs/idempotency.md', 'packages/idempotency/README.md']) {
    const blocks = tsBlocks(doc);
    assert.ok(blocks.length > 0, `${doc} has samples`);
    for (const block of blocks) {
      const file = [...examples].find(([, text]) => text === block)?.[0];
      assert.ok(file, `${doc}: a sample is not a copy of any file in src/examples:\n${block.slice(0, 200)}`);
      used.add(file);
    }
  }
  assert.deepEqual([...used].sort(), [...examples.keys()].sort(), 'every example appears in the docs');
});

test('idempotency - the README shows an Express endpoint in under 20 lines', () => {
  const block = tsBlocks('packages/idempotency/README.md')[0] ?? '';
  assert.ok(block.includes('expressIdempotency'));
  assert.ok(block.split('\n').length < 20, `${block.split('\n').length} lines`);
});
