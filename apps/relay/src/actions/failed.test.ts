import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { FERRY_RELEASE, quoteIdentifier, RELAY_PROTOCOL, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createTestDatabase, type TestDatabase } from '@ferry/testkit';
import { markFailedSql } from '../sql/mark-failed.js';
import { markPublishedSql } from '../sql/mark-published.js';
import { outboxWithState } from '../sql/outbox-state.js';
import { FAILED_CONDITION } from './event-filter.js';
import { previewFailed, SelectionChangedError, selectFailed, settleFailed } from './failed.js';
import { selectionOf } from './selection.js';

// The dlq actions (ferry dlq retry/discard and the console) on failed rows, dead or backing off, against the
// real database; and the relay's marks of a row an operator settled while a relay had it on the wire.

let db: TestDatabase;
let s: string;
const operator = { actor: 'tester@host', via: 'cli' as const };
/** Per key: [head, later] ids. */
const ids = new Map<string, string[]>();

before(async () => {
  db = await createTestDatabase({ prefix: 'dlq_failed', lanes: 2 });
  s = quoteIdentifier(db.schema);
  const publisher = createPublisher({ schema: db.schema, source: 'dlq-failed-test' });
  for (const key of ['dead', 'backoff', 'fresh', 'inflight', 'gone']) {
    const rows = await withTransaction(db.pool, (tx) =>
      publisher.publishMany(tx, [
        { subject: 'nowhere.x', key, type: 'Head', data: {} },
        { subject: 'bound.x', key, type: 'Later', data: {} },
      ]),
    );
    ids.set(
      key,
      rows.map((r) => r.id),
    );
  }
  // dead: failed for good; backoff, inflight and gone: failed 3 times, next attempt in an hour; fresh: never tried.
  // Their delivery state is their pending row's (outbox migration 000015).
  const dead = await db.pool.query(
    `UPDATE ${s}.outbox_pending p SET attempts = 25, dead_at = now(), last_error = 'no_responders' FROM ${s}.outbox o
      WHERE o.seq = p.seq AND o.id = $1`,
    [head('dead')],
  );
  assert.equal(dead.rowCount, 1);
  const backingOff = await db.pool.query(
    `UPDATE ${s}.outbox_pending p SET attempts = 3, next_attempt_at = now() + interval '1 hour', last_error = 'no_responders' FROM ${s}.outbox o
      WHERE o.seq = p.seq AND o.id = ANY ($1::uuid[])`,
    [[head('backoff'), head('inflight'), head('gone')]],
  );
  assert.equal(backingOff.rowCount, 3);
});

after(async () => {
  await db.close();
});

function head(key: string): string {
  return ids.get(key)?.[0] as string;
}

async function row(id: string) {
  const { rows } = await db.pool.query<{
    attempts: number;
    dead: boolean;
    published: boolean;
    due: boolean;
    infinite: boolean;
    last_error: string | null;
  }>(
    `SELECT attempts, dead_at IS NOT NULL AS dead, published_at IS NOT NULL AS published, next_attempt_at <= now() AS due,
            next_attempt_at = '-infinity' AS infinite, last_error FROM ${s}.outbox_events WHERE id = $1`,
    [id],
  );
  return rows[0];
}

/** Takes the lane of `id` for `owner` as a relay's lease would, and returns what a relay's claim would carry. */
async function claim(id: string, owner: string): Promise<{ seq: string; lane: number; epoch: string; attempts: number }> {
  const { rows } = await db.pool.query<{ seq: string; lane: number; attempts: number }>(
    `SELECT o.seq::text, o.lane, p.attempts FROM ${s}.outbox o JOIN ${s}.outbox_pending p ON p.seq = o.seq WHERE o.id = $1`,
    [id],
  );
  const r = rows[0];
  assert.ok(r);
  // A relay's heartbeat row, with the protocol the schema's floor admits (outbox migration 000013).
  await db.pool.query(
    `INSERT INTO ${s}.relay_instances (instance, application_name, backend_pid, seen_at, expires_at, release, protocol)
     VALUES ($1, 'ferry-relay', pg_backend_pid(), now(), now() + interval '1 minute', $2, $3) ON CONFLICT (instance) DO NOTHING`,
    [owner, FERRY_RELEASE, RELAY_PROTOCOL],
  );
  const lease = await db.pool.query<{ epoch: string }>(
    `UPDATE ${s}.relay_leases SET owner = $2, epoch = epoch + 1, renewed_at = now(), expires_at = now() + interval '1 minute'
      WHERE lane = $1 RETURNING epoch::text`,
    [r.lane, owner],
  );
  return { ...r, epoch: lease.rows[0]?.epoch as string };
}

test('dlq actions - the preview counts dead and backing-off heads, never a row that has not failed', async () => {
  const p = await previewFailed(db.pool, db.schema, { key: 'backoff' });
  assert.deepEqual([p.rows, p.dead, p.backingOff, p.keys, p.behind], [1, 0, 1, 1, 1]);
  assert.equal(p.sample[0]?.state, 'backing-off');
  const all = await previewFailed(db.pool, db.schema, {});
  assert.deepEqual([all.rows, all.dead, all.backingOff, all.keys], [4, 1, 3, 4]);
  assert.equal(all.behindKeys, 4, 'under the cap, the rows behind every key are counted');
  // Past the cap (10,000 keys by default), the rows behind are counted behind the first keys only, and it says so.
  const capped = await previewFailed(db.pool, db.schema, {}, 0, 1);
  assert.deepEqual([capped.rows, capped.keys, capped.behindKeys], [4, 4, 1], 'rows and keys stay exact');
  assert.ok(capped.behind <= all.behind, `${capped.behind} behind one key, ${all.behind} behind all`);
  const onlyDead = await previewFailed(db.pool, db.schema, { state: 'dead' });
  assert.deepEqual([onlyDead.rows, onlyDead.dead], [1, 1]);
  assert.equal((await previewFailed(db.pool, db.schema, { key: 'fresh' })).rows, 0, 'a pending row is not failed');
  assert.equal((await previewFailed(db.pool, db.schema, { state: 'pending' })).rows, 0);
  const selected = await selectFailed(db.pool, db.schema, { ids: [head('dead'), head('backoff'), head('fresh')] });
  assert.deepEqual(
    selected.map((r) => [r.id, r.state, r.subject]),
    [
      [head('dead'), 'dead', 'nowhere.x'],
      [head('backoff'), 'backing-off', 'nowhere.x'],
    ],
  );
});

test('dlq actions - retry makes a backing-off head due now; discard marks one discarded; both are audited', async () => {
  assert.deepEqual(await settleFailed(db.pool, db.schema, 'retry', { key: 'backoff' }, operator), [head('backoff')]);
  assert.deepEqual(await row(head('backoff')), {
    attempts: 0,
    dead: false,
    published: false,
    due: true,
    infinite: true,
    last_error: 'no_responders',
  });
  const later = ids.get('backoff')?.[1] as string;
  assert.deepEqual(await settleFailed(db.pool, db.schema, 'discard', { ids: [later] }, operator), [], 'a pending row is not discarded');
  assert.deepEqual(await settleFailed(db.pool, db.schema, 'discard', { key: 'gone' }, operator), [head('gone')]);
  const gone = await row(head('gone'));
  assert.equal(gone?.published, true);
  assert.equal(gone?.dead, true, 'discarded: published and dead, as a discarded dead row');
  assert.match(gone?.last_error ?? '', /^discarded by ferry dlq discard at .*: no_responders$/);
  const { rows } = await db.pool.query<{ action: string; filter: Record<string, unknown>; rows: number }>(
    `SELECT action, filter, rows FROM ${s}.operator_actions ORDER BY id`,
  );
  assert.deepEqual(rows, [
    // Each names the rows it changed: their ids in seq order, with their count and digest.
    { action: 'dlq.retry', filter: { key: 'backoff', state: 'failed', changed: changed([head('backoff')]) }, rows: 1 },
    { action: 'dlq.discard', filter: { ids: [later], state: 'failed', changed: changed([]) }, rows: 0 },
    { action: 'dlq.discard', filter: { key: 'gone', state: 'failed', changed: changed([head('gone')]) }, rows: 1 },
  ]);
});

function changed(list: string[]) {
  return { ...selectionOf(list), ids: list };
}

test('dlq actions - a confirmation whose selection changed since the preview changes nothing', async () => {
  const p = await previewFailed(db.pool, db.schema, { key: 'dead' });
  assert.equal(p.rows, 1);
  assert.deepEqual(p.selection, selectionOf([head('dead')]), 'the preview carries the digest of its ids, in seq order');
  await assert.rejects(
    settleFailed(db.pool, db.schema, 'retry', { key: 'dead' }, { ...operator, expect: { rows: 2, digest: p.selection.digest } }),
    (err: Error) => err instanceof SelectionChangedError && /the preview selected 2 failed row\(s\), now 1 match/.test(err.message),
  );
  // The same count of other rows is refused too: the digest names the rows, not how many.
  const other = selectionOf([head('backoff')]);
  await assert.rejects(
    settleFailed(db.pool, db.schema, 'retry', { key: 'dead' }, { ...operator, expect: other }),
    (err: Error) => err instanceof SelectionChangedError && /1 failed row\(s\) match again, but not the same ones/.test(err.message),
  );
  assert.equal((await row(head('dead')))?.dead, true, 'still dead');
});

test('dlq actions - a relay that had the head on the wire cannot undo a retry or a discard with its late marks', async () => {
  const id = head('inflight');
  // A relay claims the backing-off head (due, attempts 3) and sends it…
  const c = await claim(id, 'relay-a');
  // …the operator retries it meanwhile; the send fails, and the relay records its fourth failure as the last one.
  await settleFailed(db.pool, db.schema, 'retry', { ids: [id] }, operator);
  const failed = await db.pool.query(markFailedSql(s), [
    [c.seq],
    ['timeout: late'],
    [1000],
    [true],
    [c.epoch],
    'relay-a',
    [c.lane],
    [c.attempts],
  ]);
  assert.equal(failed.rowCount, 0, 'the failure record of a claim from before the retry changes nothing');
  assert.deepEqual(await row(id), { attempts: 0, dead: false, published: false, due: true, infinite: true, last_error: 'no_responders' });

  // It fails again (attempts 1 now) and is claimed again; the operator discards it while it is on the wire.
  const failedAgain = await db.pool.query(
    `UPDATE ${s}.outbox_pending p SET attempts = 1, next_attempt_at = now() FROM ${s}.outbox o WHERE o.seq = p.seq AND o.id = $1`,
    [id],
  );
  assert.equal(failedAgain.rowCount, 1);
  const again = await claim(id, 'relay-a');
  await settleFailed(db.pool, db.schema, 'discard', { ids: [id] }, operator);
  const lateFailure = await db.pool.query(markFailedSql(s), [
    [again.seq],
    ['timeout: late'],
    [1000],
    [false],
    [again.epoch],
    'relay-a',
    [again.lane],
    [again.attempts],
  ]);
  assert.equal(lateFailure.rowCount, 0, 'a late failure does not bring a discarded row back');
  const lateAck = await db.pool.query(markPublishedSql(s), [[again.seq], [again.epoch], 'relay-a', [again.lane]]);
  assert.equal(lateAck.rowCount, 0, 'a late PubAck leaves the discard as it is');
  const discarded = await row(id);
  assert.equal(discarded?.published, true);
  assert.equal(discarded?.dead, true);
  assert.match(discarded?.last_error ?? '', /^discarded by ferry dlq discard/);

  // The fence is on the row, not only on the lease: an untouched failed row is still recorded.
  const other = await claim(head('dead'), 'relay-a');
  await settleFailed(db.pool, db.schema, 'retry', { ids: [head('dead')] }, operator);
  const fresh = await claim(head('dead'), 'relay-a');
  assert.notEqual(fresh.epoch, other.epoch);
  const recorded = await db.pool.query(markFailedSql(s), [
    [fresh.seq],
    ['no_responders'],
    [1000],
    [false],
    [fresh.epoch],
    'relay-a',
    [fresh.lane],
    [fresh.attempts],
  ]);
  assert.equal(recorded.rowCount, 1, 'a claim made after the retry records its failure');
  assert.equal((await row(head('dead')))?.attempts, 1);
});

test('dlq actions - a discard waiting on a row another operator retried meanwhile leaves the retry alone', async () => {
  const publisher = createPublisher({ schema: db.schema, source: 'dlq-failed-test' });
  const [race] = await withTransaction(db.pool, (tx) =>
    publisher.publishMany(tx, [{ subject: 'nowhere.x', key: 'race', type: 'Head', data: {} }]),
  );
  const id = race?.id as string;
  await db.pool.query(
    `UPDATE ${s}.outbox_pending p SET attempts = 25, dead_at = now(), last_error = 'no_responders' FROM ${s}.outbox o WHERE o.seq = p.seq AND o.id = $1`,
    [id],
  );
  // Operator A's retry holds the row, uncommitted, while operator B's discard of the same dead row starts.
  const a = await db.pool.connect();
  try {
    await a.query('BEGIN');
    const retried = await a.query(
      `UPDATE ${s}.outbox_pending p SET attempts = 0, dead_at = NULL, next_attempt_at = '-infinity' FROM ${s}.outbox o WHERE o.seq = p.seq AND o.id = $1`,
      [id],
    );
    assert.equal(retried.rowCount, 1);
    let settled = false;
    const discard = settleFailed(db.pool, db.schema, 'discard', { ids: [id] }, operator).finally(() => {
      settled = true;
    });
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(settled, false, 'the discard waits for the row');
    await a.query('COMMIT');
    assert.deepEqual(await discard, [], 'the row is no longer failed: nothing discarded');
  } finally {
    await a.query('ROLLBACK').catch(() => {});
    a.release();
  }
  assert.deepEqual(await row(id), { attempts: 0, dead: false, published: false, due: true, infinite: true, last_error: 'no_responders' });
});

test('dlq actions - the failed-row condition lets the planner use the small index of failed rows', async () => {
  const client = await db.pool.connect();
  try {
    // With sequential scans priced out, a partial index is taken only if the condition implies its predicate.
    await client.query('BEGIN');
    await client.query('SET LOCAL enable_seqscan = off');
    for (const where of [FAILED_CONDITION, `o.key = 'dead' AND ${FAILED_CONDITION}`]) {
      const { rows } = await client.query(`EXPLAIN (FORMAT JSON) SELECT o.id FROM ${outboxWithState(s)} WHERE ${where}`);
      assert.match(JSON.stringify(rows[0]), /outbox_pending_failed_idx/, where);
    }
  } finally {
    await client.query('ROLLBACK');
    client.release();
  }
});
