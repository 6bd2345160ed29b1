// Issue 28: a `sequential` key's parked events are retried in version order,
// whatever order they were parked in, by however many instances, and whatever
// arrives after a gap timeout. Before the fix each of these locked its key.
import assert from 'node:assert/strict';
import { after, afterEach, describe, test } from 'node:test';
import { type InboxOptions, type InboxReport, listParked } from '@ferry/inbox';
import { waitFor } from '@ferry/testkit';
import { PgBoss } from 'pg-boss';
import { EFFECT_SQL, ferryEvent, type InboxFixture, inboxFixture, publishEvents } from './inbox-support.js';

const fixtures: InboxFixture[] = [];
const bosses: PgBoss[] = [];
async function release(): Promise<void> {
  for (const b of bosses.splice(0)) await b.stop({ graceful: false }).catch(() => {});
  for (const f of fixtures.splice(0)) await f.close();
}
afterEach(release);
after(release);

async function fixture(): Promise<InboxFixture> {
  const f = await inboxFixture({ max: 10 });
  fixtures.push(f);
  return f;
}

async function bossFor(f: InboxFixture): Promise<PgBoss> {
  const boss = new PgBoss({ connectionString: f.db.url, schema: f.bossSchema, supervise: false, schedule: false, max: 2 });
  boss.on('error', () => {});
  await boss.start();
  bosses.push(boss);
  return boss;
}

/** Versions of `key` in the order they were applied (one effects row each, stamped at apply). */
async function appliedOrder(f: InboxFixture, key: string): Promise<number[]> {
  const { rows } = await f.db.pool.query<{ version: string }>(
    `SELECT version::text FROM ${f.s}.effects WHERE key = $1 ORDER BY applied_at, version`,
    [key],
  );
  return rows.map((r) => Number(r.version));
}

async function recorded(f: InboxFixture, key: string): Promise<number> {
  const { rows } = await f.db.pool.query<{ version: string }>(
    `SELECT version::text FROM ${f.s}.inbox_versions WHERE consumer = 'billing' AND key = $1`,
    [key],
  );
  return Number(rows[0]?.version ?? 0);
}

async function earlyCount(f: InboxFixture): Promise<number> {
  return (await f.db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${f.s}.inbox_early`)).rows[0]?.n ?? 0;
}

const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

describe('inbox parking lot order (issue 28)', () => {
  test('inbox - sequential: stored versions past 9, 99 and 999 park and apply in number order, not text order', async () => {
    const f = await fixture();
    // The version each key fails on, from the stream, until `fixed`.
    const failOn = new Map([
      ['k10', 2],
      ['k100', 98],
      ['k1000', 997],
    ]);
    let fixed = false;
    const inbox = f.inbox({
      mode: 'sequential',
      maxDeliver: 2,
      parkRetryLimit: 0,
      handlers: {
        Set: async (event, { tx }) => {
          if (!fixed && failOn.get(event.key) === Number(event.version)) throw new Error('downstream unavailable');
          await tx.query(EFFECT_SQL(f.s).effect, [event.key, event.version.toString()]);
        },
      },
    });
    // k100 and k1000 start from a recorded version, as if their earlier versions were applied long ago.
    await f.db.pool.query(
      `INSERT INTO ${f.s}.inbox_versions (consumer, key, version) VALUES ('billing', 'k100', 97), ('billing', 'k1000', 996)`,
    );
    await inbox.start();
    const p = f.stream.prefix;
    // k10: v1, then v3..v12 (stored early); k100: v99..v105; k1000: v998..v1003.
    await publishEvents(f.stream.nc, [
      ferryEvent(p, { key: 'k10', version: 1 }),
      ...range(3, 12).map((version) => ferryEvent(p, { key: 'k10', version })),
      ...range(99, 105).map((version) => ferryEvent(p, { key: 'k100', version })),
      ...range(998, 1003).map((version) => ferryEvent(p, { key: 'k1000', version })),
    ]);
    await waitFor(async () => (await earlyCount(f)) === 10 + 7 + 6, { what: 'early versions stored', timeoutMs: 20_000 });
    // The missing versions fail and park; their stored successors follow them into the parking lot.
    await publishEvents(f.stream.nc, [
      ferryEvent(p, { key: 'k10', version: 2 }),
      ferryEvent(p, { key: 'k100', version: 98 }),
      ferryEvent(p, { key: 'k1000', version: 997 }),
    ]);
    await waitFor(() => inbox.counts().parked === 3 + 10 + 7 + 6, { what: 'every version parked', timeoutMs: 20_000 });
    const b = await bossFor(f);
    // The heads failed for good (parkRetryLimit 0); fixing the handler and retrying them frees each key.
    let heads: Awaited<ReturnType<typeof listParked>> = [];
    await waitFor(
      async () => {
        heads = (await listParked({ boss: b, consumer: 'billing' })).filter((r) => r.state === 'failed');
        return heads.length === 3;
      },
      { what: 'the three heads failed', timeoutMs: 20_000 },
    );
    assert.deepEqual(heads.map((h) => `${h.key}@${h.version}`).sort(), ['k100@98', 'k1000@997', 'k10@2'].sort());
    fixed = true;
    await b.retry(
      inbox.parkQueue,
      heads.map((h) => h.jobId),
    );
    await waitFor(
      async () => (await recorded(f, 'k10')) === 12 && (await recorded(f, 'k100')) === 105 && (await recorded(f, 'k1000')) === 1003,
      {
        what: 'every key applied through its last version',
        timeoutMs: 30_000,
      },
    );
    assert.deepEqual(await appliedOrder(f, 'k10'), range(1, 12));
    assert.deepEqual(await appliedOrder(f, 'k100'), range(98, 105));
    assert.deepEqual(await appliedOrder(f, 'k1000'), range(997, 1003));
    assert.equal(inbox.counts().parked, 3 + 10 + 7 + 6);
    assert.equal((await listParked({ boss: b, consumer: 'billing' })).length, 0, 'nothing left parked');
  });

  test('inbox - sequential: a missing version that arrives after gapTimeoutMs goes ahead of its parked successors, even once they failed', async () => {
    const f = await fixture();
    const inbox = f.inbox({
      mode: 'sequential',
      gapTimeoutMs: 1_000,
      parkRetryLimit: 1,
      parkRetryDelayMs: 1_000,
      handlers: {
        Set: async (event, { tx }) => {
          await tx.query(EFFECT_SQL(f.s).effect, [event.key, event.version.toString()]);
        },
      },
    });
    await inbox.start();
    const p = f.stream.prefix;
    // Key a: v2..v5 wait for v1 and park at the gap timeout; the park worker fails v2 for good (v1 is nowhere).
    // Key b: the same, but v1 arrives while v2 is still being retried.
    await publishEvents(f.stream.nc, [
      ...range(2, 5).map((version) => ferryEvent(p, { key: 'a', version })),
      ...range(2, 12).map((version) => ferryEvent(p, { key: 'b', version })),
    ]);
    await waitFor(() => inbox.counts().parked === 4 + 11, { what: 'both keys parked at the gap timeout', timeoutMs: 20_000 });
    await publishEvents(f.stream.nc, [ferryEvent(p, { key: 'b', version: 1 })]);
    const b = await bossFor(f);
    await waitFor(
      async () =>
        (await listParked({ boss: b, consumer: 'billing' })).some((r) => r.key === 'a' && r.version === '2' && r.state === 'failed'),
      { what: "a's v2 failed for good (its gap is real)", timeoutMs: 20_000 },
    );
    const failed = (await listParked({ boss: b, consumer: 'billing' })).find((r) => r.key === 'a' && r.state === 'failed');
    assert.match(failed?.lastError ?? '', /waits for version 1/);
    // Now a's v1 arrives, long after the gap timeout: it parks behind the failed v2 and must go ahead of it.
    await publishEvents(f.stream.nc, [ferryEvent(p, { key: 'a', version: 1 })]);
    await waitFor(async () => (await recorded(f, 'a')) === 5 && (await recorded(f, 'b')) === 12, {
      what: 'both keys applied through their last version',
      timeoutMs: 20_000,
    });
    assert.deepEqual(await appliedOrder(f, 'a'), range(1, 5));
    assert.deepEqual(await appliedOrder(f, 'b'), range(1, 12));
    assert.equal((await listParked({ boss: b, consumer: 'billing' })).length, 0, 'nothing left parked');
  });

  test('inbox - sequential, two instances: newer versions parked during a slow flush of stored ones still apply in order', async () => {
    const f = await fixture();
    let v2Calls = 0;
    const versionOf = new Map<string, number>();
    const parked: Array<{ instance: number; version: number; reason: string }> = [];
    const handlers: InboxOptions['handlers'] = {
      Set: async (event, { tx }) => {
        // v2 fails both deliveries from the stream (maxDeliver 2) and parks; the park worker applies it.
        if (event.version === 2n && ++v2Calls <= 2) throw new Error('downstream unavailable');
        // A slow handler: the park worker holds the key's row lock 5 ms an event, so the flush of the
        // stored versions (a row-lock turn each) takes seconds and interleaves with both.
        await new Promise((r) => setTimeout(r, 5));
        await tx.query(EFFECT_SQL(f.s).effect, [event.key, event.version.toString()]);
      },
    };
    const onEvent = (instance: number) => (r: InboxReport) => {
      if (r.kind === 'parked') parked.push({ instance, version: versionOf.get(r.id ?? '') ?? -1, reason: r.reason });
    };
    const a = f.inbox({ mode: 'sequential', maxDeliver: 2, backoffMs: [50], handlers, onEvent: onEvent(0) });
    const b = f.inbox({ mode: 'sequential', maxDeliver: 2, backoffMs: [50], handlers, onEvent: onEvent(1) });
    await a.start();
    await b.start();
    const p = f.stream.prefix;
    const last = 150;
    const event = (version: number) => {
      const e = ferryEvent(p, { key: 'k', version });
      versionOf.set(e.id, version);
      return e;
    };
    await publishEvents(f.stream.nc, [event(1), ...range(3, last).map(event)]);
    await waitFor(async () => (await earlyCount(f)) === last - 2, { what: 'v3..v150 stored early', timeoutMs: 30_000 });
    // v2 parks and its 148 stored successors are flushed behind it one transaction each, while
    // v151..v170 keep arriving (every 40 ms) and park behind whatever is parked by then.
    await publishEvents(f.stream.nc, [event(2)]);
    for (const version of range(last + 1, last + 20)) {
      await publishEvents(f.stream.nc, [event(version)]);
      await new Promise((r) => setTimeout(r, 40));
    }
    await waitFor(async () => (await recorded(f, 'k')) === last + 20, { what: 'k applied through v170', timeoutMs: 60_000 });
    assert.deepEqual(await appliedOrder(f, 'k'), range(1, last + 20));
    // The race the test is about happened: a version newer than the stored ones was parked (by
    // either instance) before the flush had moved the last stored one.
    const flushedLast = parked.findIndex((x) => x.version === last);
    const newerFirst = parked.findIndex((x) => x.version > last && x.reason === 'behind-parked');
    assert.ok(
      newerFirst >= 0 && newerFirst < flushedLast,
      `a newer version parked mid-flush: ${JSON.stringify(parked.filter((x) => x.version > last))}`,
    );
    // (A redelivery under load can park a second copy of a version; the gate drops it as a duplicate.)
    assert.deepEqual(
      [...new Set(parked.map((x) => x.version))].sort((x, y) => x - y),
      range(2, last + 20),
      'every version from 2 on went through the parking lot',
    );
  });

  test("inbox - sequential with a pg-boss of the caller's: start() fails naming bossSchema when it is not that pg-boss's schema", async () => {
    const f = await fixture();
    const schema = `${f.bossSchema}_own`;
    const boss = new PgBoss({ connectionString: f.db.url, schema, supervise: false, schedule: false, max: 2 });
    boss.on('error', () => {});
    await boss.start();
    bosses.push(boss);
    try {
      const handlers: InboxOptions['handlers'] = { Set: async () => {} };
      const wrong = f.inbox({ mode: 'sequential', boss, handlers }); // the fixture's bossSchema, not `schema`
      await assert.rejects(wrong.start(), (err: Error & { option?: string }) => {
        assert.equal(err.name, 'ConfigError');
        assert.equal(err.option, 'bossSchema');
        assert.match(err.message, new RegExp(`no queue ferry\\.inbox\\.billing\\.parked in schema "${f.bossSchema}"`));
        return true;
      });
      const right = f.inbox({ mode: 'sequential', boss, bossSchema: schema, handlers });
      await right.start();
      assert.equal(right.state, 'running');
      await right.stop();
    } finally {
      await boss.stop({ graceful: false }).catch(() => {});
      await f.db.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  });
});
