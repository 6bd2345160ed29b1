import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { migrate, withTransaction } from '@ferry/core';
import { listParked } from '@ferry/inbox';
import { createPublisher } from '@ferry/publisher';
import { natsUrl, waitFor } from '@ferry/testkit';
import { PgBoss } from 'pg-boss';
import { markPublished } from './delivery-state.js';
import { EFFECT_SQL, ferryEvent, type InboxFixture, inboxFixture, publishEvents } from './inbox-support.js';
import { ferry } from './ops-helpers.js';

// Issue 43, item 1: in sequential mode a version that never reaches the stream held its key for
// good. K got v1, v3, v4, v5 (gapTimeoutMs 1500, parkRetryLimit 1): `parked list` showed v3
// "waits for version 2" and exited 0, a retry failed again, discarding every parked event left K
// at 1, and v6, v7 parked too. Now `parked list` exits 1 naming the fix, `ferry inbox skip`
// accepts the missing version as lost (previewed, audited), after which the parked successors
// apply in version order, once; a replay comes first when the outbox still has the version; and a
// discard that leaves the key waiting says the exact skip that moves it on.

const KEY = 'order-7';
const REPLAY_KEY = 'order-replay';
const DISCARD_KEY = 'order-discard';
const RACE_KEY = 'order-race';

let fx: InboxFixture;
let boss: PgBoss;
/** Handler calls per key/version: each must be called once (nothing fails, so a second call would be a second apply). */
const calls = new Map<string, number>();

const run = (args: string[]) => ferry([...args, '--database-url', fx.db.url, '--schema', fx.db.schema, '--boss-schema', fx.bossSchema]);

/** The key's applied versions in the order they were applied. */
async function appliedInOrder(key: string): Promise<string[]> {
  const { rows } = await fx.db.pool.query<{ version: string }>(
    `SELECT e.version::text AS version FROM ${fx.s}.effects e WHERE e.key = $1 ORDER BY e.applied_at, e.version`,
    [key],
  );
  return rows.map((r) => r.version);
}

async function keyRow(key: string): Promise<{ version: string; parked: number; skipped: string[] }> {
  const { rows } = await fx.db.pool.query<{ version: string; parked: number; skipped: string[] }>(
    `SELECT version::text AS version, parked, skipped::text[] AS skipped FROM ${fx.s}.inbox_versions WHERE consumer = 'billing' AND key = $1`,
    [key],
  );
  return rows[0] ?? { version: 'none', parked: 0, skipped: [] };
}

/** Waits until the key's v3 failed in the parking lot, with `behind` versions parked after it. */
async function headFailed(key: string, behind: number) {
  return waitFor(
    async () => {
      const rows = (await listParked({ boss, consumer: 'billing' })).filter((r) => r.key === key);
      const head = rows.find((r) => r.version === '3');
      return head?.state === 'failed' && rows.length === behind + 1 ? rows : undefined;
    },
    { what: `${key}/3 failed in the parking lot with ${behind} behind it`, timeoutMs: 60_000 },
  );
}

before(async () => {
  fx = await inboxFixture();
  // The audit trail (operator_actions) and an outbox in the inbox's schema, as one database holds both.
  await migrate({ pool: fx.db.pool, schema: fx.db.schema, set: 'outbox' });
  const inbox = fx.inbox({
    mode: 'sequential',
    gapTimeoutMs: 1_500,
    parkRetryLimit: 1,
    parkRetryDelayMs: 1_000,
    handlers: {
      Set: async (event, { tx }) => {
        const id = `${event.key}/${event.version}`;
        calls.set(id, (calls.get(id) ?? 0) + 1);
        await tx.query(EFFECT_SQL(fx.s).effect, [event.key, event.version.toString()]);
      },
    },
  });
  await inbox.start();
  // A second consumer of the same stream whose gap timeout never comes in this test: its early
  // versions stay stored in inbox_early, so a skip must hand them to the early-version sweep.
  await fx.db.pool.query(
    `CREATE TABLE ${fx.s}.ledger (key text, version bigint, applied_at timestamptz NOT NULL DEFAULT clock_timestamp(), PRIMARY KEY (key, version))`,
  );
  const ledger = fx.inbox({
    consumer: 'ledger',
    mode: 'sequential',
    gapTimeoutMs: 600_000,
    handlers: {
      Set: async (event, { tx }) => {
        const id = `ledger/${event.key}/${event.version}`;
        calls.set(id, (calls.get(id) ?? 0) + 1);
        await tx.query(`INSERT INTO ${fx.s}.ledger (key, version) VALUES ($1, $2)`, [event.key, event.version.toString()]);
      },
    },
  });
  await ledger.start();
  boss = new PgBoss({ connectionString: fx.db.url, schema: fx.bossSchema, supervise: false, schedule: false, max: 2 });
  boss.on('error', () => {});
  await boss.start();
  // REPLAY_KEY's v1..v3 are in the outbox, published; v2 never reached the stream.
  const publisher = createPublisher({ schema: fx.db.schema, source: 'skip-test' });
  await withTransaction(fx.db.pool, (tx) =>
    publisher.publishMany(
      tx,
      [1, 2, 3].map(() => ({ subject: `${fx.stream.prefix}.set`, key: REPLAY_KEY, type: 'Set', data: { replayed: true } })),
    ),
  );
  await markPublished(fx.db.pool, fx.db.schema, 'o.key = $1', [REPLAY_KEY]);
  const p = fx.stream.prefix;
  await publishEvents(fx.stream.nc, [
    ...[1, 3, 4, 5].map((version) => ferryEvent(p, { key: KEY, version })),
    ...[1, 3].map((version) => ferryEvent(p, { key: REPLAY_KEY, version })),
    ...[1, 3, 4].map((version) => ferryEvent(p, { key: DISCARD_KEY, version })),
    ...[1, 3].map((version) => ferryEvent(p, { key: RACE_KEY, version })),
  ]);
  await headFailed(KEY, 2);
  await headFailed(REPLAY_KEY, 0);
  await headFailed(DISCARD_KEY, 1);
  await headFailed(RACE_KEY, 0);
});

after(async () => {
  await boss?.stop({ graceful: false }).catch(() => {});
  await fx?.close();
});

describe('ferry inbox skip', () => {
  test('inbox skip - a version that never arrives: parked list exits 1 with the fix, the skip is previewed and audited, then v3..v7 apply once, in order', async () => {
    const listed = await run(['inbox', 'parked', 'list', '--consumer', 'billing']);
    assert.equal(listed.code, 1, listed.err);
    assert.match(listed.out, /key=order-7 v3 Set/);
    assert.match(listed.err, /key "order-7" waits for version 2, which nothing holds/);
    assert.match(
      listed.err,
      /does not hold it to replay; accept it as lost: ferry inbox skip --consumer billing --key order-7 --through 2 .*--dry-run/,
    );
    assert.match(listed.err, /4 key\(s\) wait for a version nothing holds/);

    // Later versions park behind the stuck head, as before.
    await publishEvents(
      fx.stream.nc,
      [6, 7].map((version) => ferryEvent(fx.stream.prefix, { key: KEY, version })),
    );
    await waitFor(async () => ((await keyRow(KEY)).parked === 5 ? true : undefined), {
      what: 'v6 and v7 parked behind v3',
      timeoutMs: 30_000,
    });
    assert.deepEqual(await appliedInOrder(KEY), ['1']);

    const over = await run(['inbox', 'skip', '--consumer', 'billing', '--key', KEY, '--through', '4', '--yes']);
    assert.equal(over.code, 2, over.out);
    assert.match(over.err, /version 3 of key "order-7" is parked, so it is not missing: skip through 2 at most/);

    const preview = await run(['inbox', 'skip', '--consumer', 'billing', '--key', KEY, '--dry-run']);
    assert.equal(preview.code, 0, preview.err);
    assert.match(preview.out, /is at version 1 and waits for version 2, which nothing holds/);
    assert.match(
      preview.out,
      /held above it: 3 \(parked, failed\), 4 \(parked, created\), 5 \(parked, created\), 6 \(parked, created\), 7 \(parked, created\)/,
    );
    assert.match(preview.out, /would skip version\(s\) 2\.\.2 of key "order-7"/);
    const digest = /--expect-selection ([0-9a-f]{64})/.exec(preview.out)?.[1];
    assert.ok(digest, preview.out);
    assert.deepEqual(await keyRow(KEY), { version: '1', parked: 5, skipped: [] }, 'a preview changes nothing');

    // A confirmation of another selection (the key moved since its preview) changes nothing, and is recorded.
    const stale = await run(['inbox', 'skip', '--consumer', 'billing', '--key', KEY, '--yes', '--expect-selection', '0'.repeat(64)]);
    assert.equal(stale.code, 1, stale.err);
    assert.match(stale.err, /nothing done: key "order-7" of consumer billing is at version 1 now, or the range is not the one previewed/);
    assert.equal((await keyRow(KEY)).version, '1');

    const skipped = await run(['inbox', 'skip', '--consumer', 'billing', '--key', KEY, '--yes', '--expect-selection', digest, '--json']);
    assert.equal(skipped.code, 0, skipped.err);
    assert.deepEqual(skipped.json(), {
      consumer: 'billing',
      key: KEY,
      skipped: { from: '2', through: '2' },
      recordedBefore: '1',
      recorded: '2',
      woken: 1,
    });
    // The same skip again: nothing left to skip.
    const again = await run([
      'inbox',
      'skip',
      '--consumer',
      'billing',
      '--key',
      KEY,
      '--through',
      '2',
      '--yes',
      '--expect-selection',
      digest,
    ]);
    assert.equal(again.code, 2);
    assert.match(again.err, /nothing to skip/);

    await waitFor(async () => ((await appliedInOrder(KEY)).length === 6 ? true : undefined), {
      what: 'v3..v7 applied after the skip',
      timeoutMs: 30_000,
    });
    assert.deepEqual(await appliedInOrder(KEY), ['1', '3', '4', '5', '6', '7']);
    for (const v of [1, 3, 4, 5, 6, 7]) assert.equal(calls.get(`${KEY}/${v}`), 1, `${KEY}/${v} applied once`);
    assert.equal(calls.get(`${KEY}/2`), undefined);
    assert.deepEqual(await keyRow(KEY), { version: '7', parked: 0, skipped: [] });

    const { rows: audit } = await fx.db.pool.query<{ action: string; filter: Record<string, unknown>; outcome: string; via: string }>(
      `SELECT action, filter, outcome, via FROM ${fx.s}.operator_actions WHERE action = 'inbox.skip' ORDER BY id`,
    );
    assert.equal(audit.length, 2, JSON.stringify(audit));
    assert.match(audit[0]?.outcome ?? '', /nothing done/, 'the refused confirmation is in the trail too');
    assert.equal(audit[1]?.outcome, 'ok');
    assert.equal(audit[1]?.via, 'cli');
    assert.equal(audit[1]?.filter.key, KEY);
    assert.equal(audit[1]?.filter.through, '2');
    assert.equal(audit[1]?.filter.recorded, '2');
    assert.equal(audit[1]?.filter.previewDigest, digest);
  });

  test('inbox skip - when the outbox still holds the missing version, the fix is its exact replay, the skip is refused without --skip-replayable, and the replay moves the key on', async () => {
    const listed = await run(['inbox', 'parked', 'list', '--consumer', 'billing']);
    assert.equal(listed.code, 1);
    const replay = new RegExp(
      `key "${REPLAY_KEY}" waits for version 2.*replay first, then nothing is lost: (ferry replay --schema \\S+ --key ${REPLAY_KEY} --from-seq \\d+ --to-seq \\d+)`,
    ).exec(listed.err)?.[1];
    assert.ok(replay, listed.err);

    const preview = await run(['inbox', 'skip', '--consumer', 'billing', '--key', REPLAY_KEY, '--dry-run']);
    assert.equal(preview.code, 0, preview.err);
    assert.match(preview.out, /the outbox \(schema \S+\) still holds 1 of these version\(s\) \(2\): replay first/);
    assert.match(preview.out, /--skip-replayable/);
    const refused = await run(['inbox', 'skip', '--consumer', 'billing', '--key', REPLAY_KEY, '--yes']);
    assert.equal(refused.code, 1);
    assert.match(refused.err, /nothing done: the outbox still holds missing version\(s\)/);
    assert.equal((await keyRow(REPLAY_KEY)).version, '1');

    // The printed command, as the operator pastes it (with this test's connections).
    const args = replay.split(' ').slice(1);
    const sent = await ferry([...args, '--yes', '--database-url', fx.db.url, '--nats-url', natsUrl(), '--progress', 'none']);
    assert.equal(sent.code, 0, sent.err);
    await waitFor(async () => ((await appliedInOrder(REPLAY_KEY)).length === 3 ? true : undefined), {
      what: 'the replayed v2, then v3, applied',
      timeoutMs: 30_000,
    });
    assert.deepEqual(await appliedInOrder(REPLAY_KEY), ['1', '2', '3']);
    for (const v of [1, 2, 3]) assert.equal(calls.get(`${REPLAY_KEY}/${v}`), 1);
  });

  test('inbox skip - a skip that commits while the park worker is failing the head on its gap makes the worker run it again, not fail it', async () => {
    const job = (await listParked({ boss, consumer: 'billing' })).find((r) => r.key === RACE_KEY);
    assert.ok(job);
    const jobTable = `"${fx.bossSchema}".job`;
    const client = await fx.db.pool.connect();
    try {
      // Hold the key's row lock, as a skip's transaction does, while the head runs on its last attempt.
      await client.query('BEGIN');
      await client.query(`SELECT version FROM ${fx.s}.inbox_versions WHERE consumer = 'billing' AND key = $1 FOR UPDATE`, [RACE_KEY]);
      await fx.db.pool.query(
        `UPDATE ${jobTable} SET state = 'retry', start_after = now(), retry_count = retry_limit WHERE id = $1 AND state = 'failed'`,
        [job.jobId],
      );
      // The run's gate finds the gap (an UPDATE that matches no row does not wait), and the worker then
      // waits for the key's lock to fail the job.
      await waitFor(
        async () => {
          const { rows } = await fx.db.pool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1 AND query LIKE '%FOR UPDATE%'`,
            [`%${fx.s}.inbox_versions%`],
          );
          return rows[0]?.n === 1 ? true : undefined;
        },
        { what: 'the park worker waiting for the key lock after its gap', timeoutMs: 30_000, intervalMs: 50 },
      );
      // The skip of version 2, committed before the worker gets the lock.
      await client.query(`UPDATE ${fx.s}.inbox_versions SET version = 2 WHERE consumer = 'billing' AND key = $1`, [RACE_KEY]);
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    const state = await waitFor(
      async () => {
        const { rows } = await fx.db.pool.query<{ state: string }>(`SELECT state::text AS state FROM ${jobTable} WHERE id = $1`, [
          job.jobId,
        ]);
        const s = rows[0]?.state;
        return s === 'completed' || s === 'failed' ? s : undefined;
      },
      { what: 'the head job settled', timeoutMs: 30_000 },
    );
    assert.equal(state, 'completed', 'the gap had closed: the job ran again and applied');
    assert.deepEqual(await appliedInOrder(RACE_KEY), ['1', '3']);
    assert.equal(calls.get(`${RACE_KEY}/3`), 1);
  });

  test('inbox skip - discarding every parked event of a key waiting below them names the exact skip, which then moves the key on', async () => {
    const rows = (await listParked({ boss, consumer: 'billing' })).filter((r) => r.key === DISCARD_KEY);
    const ids = rows.map((r) => r.jobId);
    assert.equal(ids.length, 2);
    const dry = await run(['inbox', 'parked', 'discard', ...ids, '--consumer', 'billing', '--dry-run']);
    assert.equal(dry.code, 0, dry.err);
    assert.match(dry.err, /key "order-discard" waits for version 2, which nothing holds: discarding its parked events does not move it on/);
    const discarded = await run(['inbox', 'parked', 'discard', ...ids, '--consumer', 'billing', '--yes']);
    assert.equal(discarded.code, 0, discarded.err);
    assert.match(discarded.out, /discarded 2 of 2/);
    const skip = /accept it as lost: (ferry inbox skip --consumer billing --key order-discard --through 2[^;]*) --dry-run/.exec(
      discarded.err,
    )?.[1];
    assert.ok(skip, discarded.err);
    assert.deepEqual(await keyRow(DISCARD_KEY), { version: '1', parked: 0, skipped: ['3', '4'] });
    const stuck = await run(['inbox', 'parked', 'list', '--consumer', 'billing']);
    assert.equal(stuck.code, 1);
    assert.match(stuck.err, /key "order-discard" waits for version 2/);

    const args = skip.split(' ').slice(1);
    const done = await ferry([...args, '--yes', '--database-url', fx.db.url]);
    assert.equal(done.code, 0, done.err);
    assert.match(done.out, /skipped version\(s\) 2\.\.2 of key "order-discard" \(consumer billing\): it is at version 4 now/);
    await publishEvents(fx.stream.nc, [ferryEvent(fx.stream.prefix, { key: DISCARD_KEY, version: 5 })]);
    await waitFor(async () => ((await appliedInOrder(DISCARD_KEY)).includes('5') ? true : undefined), {
      what: 'v5 applied after the skip',
      timeoutMs: 30_000,
    });
    assert.deepEqual(await appliedInOrder(DISCARD_KEY), ['1', '5']);
    const clean = await run(['inbox', 'parked', 'list', '--consumer', 'billing']);
    assert.equal(clean.code, 0, clean.err);
    assert.equal(clean.out, 'no parked events');
  });

  test('inbox skip - successors stored early (the gap timeout far off) apply once, in order, right after the skip', async () => {
    const early = async () =>
      (
        await fx.db.pool.query<{ v: string }>(
          `SELECT version::text AS v FROM ${fx.s}.inbox_early WHERE consumer = 'ledger' AND key = $1 ORDER BY version`,
          [KEY],
        )
      ).rows.map((r) => r.v);
    await waitFor(async () => ((await early()).length === 5 ? true : undefined), { what: 'ledger stored v3..v7 early', timeoutMs: 30_000 });
    const preview = await run(['inbox', 'skip', '--consumer', 'ledger', '--key', KEY, '--dry-run']);
    assert.equal(preview.code, 0, preview.err);
    assert.match(preview.out, /held above it: 3 \(early\), 4 \(early\), 5 \(early\), 6 \(early\), 7 \(early\)/);
    assert.match(preview.out, /would skip version\(s\) 2\.\.2/);
    const skipped = await run(['inbox', 'skip', '--consumer', 'ledger', '--key', KEY, '--yes']);
    assert.equal(skipped.code, 0, skipped.err);
    const applied = async () =>
      (
        await fx.db.pool.query<{ v: string }>(`SELECT version::text AS v FROM ${fx.s}.ledger WHERE key = $1 ORDER BY applied_at, version`, [
          KEY,
        ])
      ).rows.map((r) => r.v);
    // Well inside the 600 s gap timeout: the sweep (every second) drains them, nothing parks them.
    await waitFor(async () => ((await applied()).length === 6 ? true : undefined), { what: 'ledger applied v3..v7', timeoutMs: 30_000 });
    assert.deepEqual(await applied(), ['1', '3', '4', '5', '6', '7']);
    for (const v of [1, 3, 4, 5, 6, 7]) assert.equal(calls.get(`ledger/${KEY}/${v}`), 1);
    assert.deepEqual(await early(), []);
  });
});
