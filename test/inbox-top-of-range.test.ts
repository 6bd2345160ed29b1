import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { quoteIdentifier } from '@ferry/core';
import { discardParked, type Inbox, type InboxMode, type Logger, listParked, parkQueueName, readParkedJob } from '@ferry/inbox';
import { waitFor } from '@ferry/testkit';
import { PgBoss } from 'pg-boss';
import { countReports, EFFECT_SQL, ferryEvent, type InboxFixture, inboxFixture, publishEvents, publishRaw } from './inbox-support.js';

// Issue 43 item 3: a key applied at 2^63-1-10 in `latest` mode, then switched to `sequential`,
// stopped for good: MAX-9 applied, MAX-8 stayed in inbox_early (`version <= recorded + 100`
// overflowed on every drain), and the log said "bigint out of range" over and over. Every mode
// now takes the versions at the top of the range: they apply, or park with a reason.

const MAX = 2n ** 63n - 1n;
const fixtures: InboxFixture[] = [];
const bosses: PgBoss[] = [];
after(async () => {
  for (const b of bosses) await b.stop({ graceful: false }).catch(() => {});
  for (const f of fixtures) await f.close();
});

/** A fixture, the problems its inboxes log, and an inbox factory whose handler records each applied (key, version). */
async function topFixture() {
  const f = await inboxFixture();
  fixtures.push(f);
  const logged: string[] = [];
  const note = (o: object, msg?: string) => {
    const { err, error } = o as { err?: unknown; error?: unknown };
    logged.push(`${msg ?? ''} ${err instanceof Error ? err.message : String(err ?? '')} ${String(error ?? '')}`);
  };
  const logger: Logger = { debug() {}, info() {}, warn: note, error: note };
  const start = async (mode: InboxMode, more: { gapTimeoutMs?: number; parkRetryLimit?: number } = {}): Promise<Inbox> => {
    const inbox = f.inbox({
      mode,
      logger,
      ...more,
      handlers: {
        Set: async (event, { tx }) => {
          await tx.query(EFFECT_SQL(f.s).effect, [event.key, event.version.toString()]);
        },
      },
    });
    await inbox.start();
    return inbox;
  };
  /** Waits for `check`, failing at once when anything logged or reported an overflow. */
  /** Waits for `check`; ends at once, failing, when anything logged or reported an overflow. */
  const until = async (check: () => Promise<boolean>, what: string): Promise<void> => {
    const overflow = () =>
      [...logged, ...f.reports.map((r) => (r.kind === 'failed' ? String(r.error) : ''))].find((l) => /out of range/.test(l));
    const seen = await waitFor(async () => overflow() ?? ((await check()) ? 'ok' : undefined), { what, timeoutMs: 60_000, intervalMs: 50 });
    assert.equal(seen, 'ok', `an overflow while waiting for ${what}: ${seen}`);
  };
  const recorded = async (key: string) =>
    (
      await f.db.pool.query<{ version: string; skipped: string[]; parked: number }>(
        `SELECT v.version::text AS version, v.skipped::text[] AS skipped, v.parked FROM ${f.s}.inbox_versions v WHERE v.consumer = 'billing' AND v.key = $1`,
        [key],
      )
    ).rows[0];
  /** The key's applied versions, in the order they were applied. */
  const applied = async (key: string) =>
    (
      await f.db.pool.query<{ version: string }>(
        `SELECT e.version::text AS version FROM ${f.s}.effects e WHERE e.key = $1 ORDER BY e.applied_at, e.version`,
        [key],
      )
    ).rows.map((r) => r.version);
  return { f, logged, start, until, recorded, applied };
}

const top = (below: number) => (MAX - BigInt(below)).toString();

/** A message whose ce-sequence is 2^63, one past the largest version: it can only park. */
async function publishBeyondTop(f: InboxFixture, key: string): Promise<void> {
  await publishRaw(
    f.stream.nc,
    `${f.stream.prefix}.set`,
    {
      'Nats-Msg-Id': `beyond-${key}`,
      'ce-specversion': '1.0',
      'ce-id': '00000000-0000-4000-8000-000000000001',
      'ce-source': 'ferry-test',
      'ce-type': 'Set',
      'ce-partitionkey': key,
      'ce-sequence': (MAX + 1n).toString(),
      'Content-Type': 'application/json',
    },
    Buffer.from('{}'),
  );
}

/** Waits for the message beyond the top to be parked as undecodable, naming the bound; returns its job data. */
async function parkedBeyondTop(f: InboxFixture): Promise<unknown> {
  const found = await waitFor(
    async () =>
      (
        await f.db.pool.query<{ data: unknown; error: string }>(
          `SELECT j.data, j.data->>'error' AS error FROM ${quoteIdentifier(f.bossSchema)}.job j
            WHERE j.name = $1 AND j.data->>'reason' = 'undecodable-headers'`,
          [parkQueueName('billing')],
        )
      ).rows[0],
    { what: 'the version beyond 2^63-1 parked', timeoutMs: 30_000 },
  );
  assert.match(found.error, /ce-sequence .*9223372036854775808.* at most 2\^63-1/);
  return found.data;
}

describe('inbox at the top of the version range', () => {
  test('inbox top of range - a key applied at MAX-10 in latest mode, switched to sequential, applies MAX-8 after MAX-9 and on to MAX', async () => {
    const { f, logged, start, until, recorded, applied } = await topFixture();
    const p = f.stream.prefix;
    const latest = await start('latest');
    await publishEvents(f.stream.nc, [ferryEvent(p, { key: 'top', version: MAX - 10n })]);
    await until(async () => (await recorded('top'))?.version === top(10), 'MAX-10 applied in latest mode');
    await latest.stop();

    await start('sequential');
    // MAX-8 first: stored early, waiting for MAX-9.
    await publishEvents(f.stream.nc, [ferryEvent(p, { key: 'top', version: MAX - 8n })]);
    await until(
      async () => (await f.db.pool.query(`SELECT 1 FROM ${f.s}.inbox_early e WHERE e.key = 'top'`)).rows.length === 1,
      'MAX-8 stored early',
    );
    await publishEvents(f.stream.nc, [ferryEvent(p, { key: 'top', version: MAX - 9n })]);
    await until(async () => (await recorded('top'))?.version === top(8), 'MAX-9 applied, then MAX-8 from inbox_early');
    // The rest, out of order, up to 2^63-1 itself.
    await publishEvents(
      f.stream.nc,
      [4, 6, 5, 7, 3, 0, 2, 1].map((below) => ferryEvent(p, { key: 'top', version: MAX - BigInt(below) })),
    );
    await until(async () => (await recorded('top'))?.version === top(0), 'MAX applied');
    assert.deepEqual(await applied('top'), [10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0].map(top), 'every version once, in order');
    assert.deepEqual(await recorded('top'), { version: MAX.toString(), skipped: [], parked: 0 });
    // Past MAX: a copy of MAX is a duplicate, an older one stale, and 2^63 parks with its reason.
    const before = { duplicate: countReports(f.reports, 'duplicate'), stale: countReports(f.reports, 'stale') };
    await publishEvents(f.stream.nc, [ferryEvent(p, { key: 'top', version: MAX }), ferryEvent(p, { key: 'top', version: MAX - 5n })], {
      msgIdSuffix: 'copy',
    });
    await until(
      async () => countReports(f.reports, 'duplicate') > before.duplicate && countReports(f.reports, 'stale') > before.stale,
      'the copies dropped',
    );
    await publishBeyondTop(f, 'top');
    const data = await parkedBeyondTop(f);
    assert.deepEqual(await applied('top'), [10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0].map(top), 'nothing applied twice');
    assert.deepEqual(
      logged.filter((l) => /out of range/.test(l)),
      [],
    );
    // A parked job's version is read as a version only up to 2^63-1 (a larger one made a discard fail).
    const job = { ...(data as object), key: 'top' };
    assert.equal(readParkedJob({ ...job, version: MAX.toString() }).kind, 'parked');
    const beyond = readParkedJob({ ...job, version: (MAX + 1n).toString() });
    assert.ok(beyond.kind === 'malformed' && beyond.problem === 'version is not a version', JSON.stringify(beyond));
  });

  test('inbox top of range - latest mode applies MAX-1 and MAX, drops their copies, and parks 2^63', async () => {
    const { f, logged, start, until, recorded, applied } = await topFixture();
    const p = f.stream.prefix;
    await start('latest');
    await publishEvents(f.stream.nc, [ferryEvent(p, { key: 'top', version: MAX - 1n }), ferryEvent(p, { key: 'top', version: MAX })]);
    await until(async () => (await recorded('top'))?.version === top(0), 'MAX applied');
    await publishEvents(f.stream.nc, [ferryEvent(p, { key: 'top', version: MAX - 1n }), ferryEvent(p, { key: 'top', version: MAX })], {
      msgIdSuffix: 'copy',
    });
    await until(async () => countReports(f.reports, 'stale') === 1 && countReports(f.reports, 'duplicate') === 1, 'the copies dropped');
    await publishBeyondTop(f, 'top');
    await parkedBeyondTop(f);
    assert.deepEqual(await applied('top'), [top(1), top(0)]);
    assert.deepEqual(
      logged.filter((l) => /out of range/.test(l)),
      [],
    );
  });

  test('inbox top of range - dedupe mode applies events versioned MAX-1 and MAX once each, and parks 2^63', async () => {
    const { f, start, until, applied } = await topFixture();
    const p = f.stream.prefix;
    await start('dedupe');
    const events = [ferryEvent(p, { key: 'a', version: MAX }), ferryEvent(p, { key: 'b', version: MAX - 1n })];
    await publishEvents(f.stream.nc, events);
    await publishEvents(f.stream.nc, events, { msgIdSuffix: 'copy' });
    await until(async () => countReports(f.reports, 'applied') === 2 && countReports(f.reports, 'duplicate') === 2, 'both applied once');
    await publishBeyondTop(f, 'a');
    await parkedBeyondTop(f);
    assert.deepEqual([await applied('a'), await applied('b')], [[top(0)], [top(1)]]);
  });

  test('inbox top of range - sequential applies MAX-1 though the key still lists a version skipped long ago, and moves over a skipped MAX', async () => {
    // A discard in sequential mode leaves v3 in `skipped`; latest mode then moves the key over it
    // without clearing it. Back in sequential, with MAX discarded while MAX-1 was missing, applying
    // MAX-1 ran inbox_next_version(MAX-1, {3, MAX}), whose `s <= p_version + 2` overflowed on
    // every try: the key never moved again.
    const { f, start, until, recorded, applied } = await topFixture();
    const p = f.stream.prefix;
    const boss = new PgBoss({ connectionString: f.db.url, schema: f.bossSchema, supervise: false, schedule: false, max: 2 });
    bosses.push(boss);
    boss.on('error', () => {});
    await boss.start();
    /** Waits for `version` of key a to park and fail (its predecessor missing), then discards it. */
    const discard = async (version: string) => {
      const parked = await waitFor(
        async () => (await listParked({ boss, consumer: 'billing' })).find((r) => r.version === version && r.state === 'failed'),
        { what: `a/${version} parked for its gap and failed`, timeoutMs: 30_000 },
      );
      assert.equal(await discardParked({ boss, consumer: 'billing', ids: [parked.jobId], pool: f.db.pool, schema: f.db.schema }), 1);
    };
    const first = await start('sequential', { gapTimeoutMs: 200, parkRetryLimit: 0 });
    await publishEvents(f.stream.nc, [ferryEvent(p, { key: 'a', version: 1 }), ferryEvent(p, { key: 'a', version: 3 })]);
    await discard('3');
    assert.deepEqual(await recorded('a'), { version: '1', skipped: ['3'], parked: 0 });
    await first.stop();

    const latest = await start('latest');
    await publishEvents(f.stream.nc, [ferryEvent(p, { key: 'a', version: MAX - 2n })]);
    await until(async () => (await recorded('a'))?.version === top(2), 'MAX-2 applied in latest mode');
    assert.deepEqual((await recorded('a'))?.skipped, ['3'], 'latest mode left the skipped version');
    await latest.stop();

    await start('sequential', { gapTimeoutMs: 200, parkRetryLimit: 0 });
    await publishEvents(f.stream.nc, [ferryEvent(p, { key: 'a', version: MAX })]);
    await discard(top(0));
    assert.deepEqual(await recorded('a'), { version: top(2), skipped: ['3', top(0)], parked: 0 });
    await publishEvents(f.stream.nc, [ferryEvent(p, { key: 'a', version: MAX - 1n })]);
    await until(async () => (await recorded('a'))?.version === top(0), 'MAX-1 applied, and the key moved over the skipped MAX');
    assert.deepEqual(await recorded('a'), { version: top(0), skipped: [], parked: 0 });
    assert.deepEqual(await applied('a'), ['1', top(2), top(1)]);
  });
});
