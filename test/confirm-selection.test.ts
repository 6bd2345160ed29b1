import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, test } from 'node:test';
import { quoteIdentifier, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createTestDatabase, type TestDatabase, waitFor } from '@ferry/testkit';
import { markPublished, setFailed } from './delivery-state.js';
import { ferry } from './ops-helpers.js';
import { FERRY_BIN } from './relay-helpers.js';

// Issue 42, item 3: a confirmation acts on exactly the rows its preview showed, or on none. Rows A,
// C, B in seq order; A and B back off; the operator is shown A and B; before the confirmation A is
// published and C fails. The CLI's confirmed paths must then change nothing (the console's is in
// console-dlq-http.test.ts).

let db: TestDatabase;
let s: string;
const base = () => ['--database-url', db.url, '--schema', db.schema];

before(async () => {
  db = await createTestDatabase({ prefix: 'confirm_selection', lanes: 2 });
  s = quoteIdentifier(db.schema);
});

after(async () => {
  await db?.close();
});

/** Rows A, C, B of subject prefix `prefix.`, each its key's head, in seq order; A and B backing off. */
async function acb(prefix: string): Promise<{ id: (name: 'A' | 'B' | 'C') => string; fail: (name: 'A' | 'B' | 'C') => Promise<void> }> {
  const publisher = createPublisher({ schema: db.schema, source: 'confirm-selection' });
  const ids = new Map<string, string>();
  for (const name of ['A', 'C', 'B']) {
    const [row] = await withTransaction(db.pool, (tx) =>
      publisher.publishMany(tx, [{ subject: `${prefix}.${name}`, key: `${prefix}-${name}`, type: 'Head', data: {} }]),
    );
    ids.set(name, row?.id as string);
  }
  const id = (name: string) => ids.get(name) as string;
  const fail = async (name: string) => {
    const n = await setFailed(db.pool, db.schema, 'o.id = $1', [id(name)], {
      attempts: 2,
      nextAttemptAt: `now() + interval '1 hour'`,
      lastError: 'no_responders',
    });
    assert.equal(n, 1);
  };
  await fail('A');
  await fail('B');
  return { id, fail };
}

/** Each row of the prefix, in seq order, as `NAME:state`. */
async function states(prefix: string, id: (name: 'A' | 'B' | 'C') => string): Promise<string[]> {
  const { rows } = await db.pool.query<{ id: string; state: string }>(
    `SELECT id::text AS id, CASE WHEN published_at IS NULL THEN 'pending' WHEN dead_at IS NULL THEN 'published' ELSE 'discarded' END AS state
       FROM ${s}.outbox_events WHERE starts_with(subject, $1) ORDER BY seq`,
    [`${prefix}.`],
  );
  const name = (x: string) => (['A', 'B', 'C'] as const).find((n) => id(n) === x) ?? x;
  return rows.map((r) => `${name(r.id)}:${r.state}`);
}

test('ferry dlq discard - a terminal confirmation acts on the selection it asked about, or on nothing', async () => {
  const { id, fail } = await acb('tty');
  // A real terminal (script(1) gives the command a pty): the command asks, the rows change, the operator says yes.
  const command = [process.execPath, FERRY_BIN, 'dlq', 'discard', '--all-failed', ...base()].map((a) => `'${a}'`).join(' ');
  const child = spawn('script', ['-qfec', command, '/dev/null'], { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (c: Buffer) => {
    out += c.toString('utf8');
  });
  const exited = new Promise<number>((resolve) => child.on('close', (code) => resolve(code ?? -1)));
  try {
    await waitFor(() => /\[y\/N\]/.test(out), { what: 'the confirmation question', timeoutMs: 30_000 });
    assert.match(out, /discard 2 failed events of every key \(2 keys, backing off/);
    // Before the operator answers: A is published, C fails. Still two failed rows, not the two asked about.
    assert.equal(await markPublished(db.pool, db.schema, 'o.id = $1', [id('A')]), 1);
    await fail('C');
    child.stdin.write('y\n');
    assert.equal(await exited, 1, out);
  } finally {
    child.kill();
  }
  assert.match(out, /nothing done: the selection changed since the preview: 2 failed row\(s\) match again, but not the same ones/);
  assert.deepEqual(await states('tty', id), ['A:published', 'C:pending', 'B:pending'], 'nothing was discarded');
});

test('ferry dlq discard - --expect-selection holds a scripted confirmation to what --dry-run showed; the audit row names the ids', async () => {
  const { id, fail } = await acb('dry');
  const dry = await ferry(['dlq', 'discard', '--all-failed', '--dry-run', '--json', ...base()]);
  assert.equal(dry.code, 0, dry.err);
  const shown = dry.json<{ wouldChange: string[]; selection: { rows: number; digest: string } }>();
  const failedNow = shown.wouldChange.filter((x) => x === id('A') || x === id('B'));
  assert.deepEqual(failedNow, [id('A'), id('B')]);
  assert.match(shown.selection.digest, /^[0-9a-f]{64}$/);

  assert.equal(await markPublished(db.pool, db.schema, 'o.id = $1', [id('A')]), 1);
  await fail('C');
  const refused = await ferry(['dlq', 'discard', '--all-failed', '--yes', '--expect-selection', shown.selection.digest, ...base()]);
  assert.equal(refused.code, 1, refused.out);
  assert.match(refused.err, /nothing done: the selection changed/);
  assert.deepEqual(await states('dry', id), ['A:published', 'C:pending', 'B:pending'], 'nothing was discarded');

  // Previewed again, confirmed with the new digest: exactly C and B, and the audit row names them.
  const again = await ferry(['dlq', 'discard', '--all-failed', '--dry-run', '--json', ...base()]);
  const digest = again.json<{ selection: { digest: string } }>().selection.digest;
  const done = await ferry(['dlq', 'discard', '--all-failed', '--yes', '--expect-selection', digest, '--json', ...base()]);
  assert.equal(done.code, 0, done.err);
  assert.deepEqual(done.json<{ discarded: string[] }>().discarded, again.json<{ wouldChange: string[] }>().wouldChange);
  assert.deepEqual(await states('dry', id), ['A:published', 'C:discarded', 'B:discarded']);
  const { rows } = await db.pool.query<{ filter: { changed: { rows: number; digest: string; ids: string[] } }; outcome: string }>(
    `SELECT filter, outcome FROM ${s}.operator_actions WHERE filter->>'previewDigest' = $1`,
    [digest],
  );
  assert.equal(rows.length, 1);
  assert.equal(rows[0]?.outcome, 'ok');
  assert.deepEqual(
    rows[0]?.filter.changed.ids.filter((x) => x === id('C') || x === id('B')),
    [id('C'), id('B')],
  );
  assert.equal(rows[0]?.filter.changed.digest, digest);
});
