import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { quoteIdentifier } from '@ferry/core';
import { parkQueueName } from '@ferry/inbox';
import { waitFor } from '@ferry/testkit';
import { EFFECT_SQL, ferryEvent, type InboxFixture, inboxFixture, publishEvents } from './inbox-support.js';

// Issue 43 item 5: the parking lot gave a parked event parkRetryLimit + 1 tries, within seconds,
// so a handler whose dependency restarted failed healthy keys for good. Now it retries for
// retrySpanMs (default 15 minutes) before a head is `failed`.

const fixtures: InboxFixture[] = [];
after(async () => {
  for (const f of fixtures) await f.close();
});

/** How many of the consumer's parked jobs are in `state`. */
async function jobsIn(f: InboxFixture, state: string): Promise<number> {
  const { rows } = await f.db.pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM ${quoteIdentifier(f.bossSchema)}.job WHERE name = $1 AND state = $2`,
    [parkQueueName('billing'), state],
  );
  return rows[0]?.n ?? 0;
}

describe('inbox retry span', () => {
  test('inbox retry span - a handler failing its first 4 tries on 20 keys, over seconds, ends with every key applied in order and none failed', async () => {
    const f = await inboxFixture();
    fixtures.push(f);
    const keys = Array.from({ length: 20 }, (_, i) => `k${String(i).padStart(2, '0')}`);
    const FAILURES = 4;
    const calls = new Map<string, number>();
    const inbox = f.inbox({
      mode: 'sequential',
      // Two tries from the stream, then the parking lot: before, it gave up after 1 + parkRetryLimit more,
      // 4 tries in all, so each key's head failed for good.
      maxDeliver: 2,
      backoffMs: [100],
      parkRetryLimit: 1,
      parkRetryDelayMs: 1_000,
      retrySpanMs: 30_000,
      handlers: {
        Set: async (event, { tx }) => {
          const n = (calls.get(event.key) ?? 0) + 1;
          calls.set(event.key, n);
          if (n <= FAILURES) throw new Error(`dependency restarting (try ${n} of key ${event.key})`);
          await tx.query(EFFECT_SQL(f.s).effect, [event.key, event.version.toString()]);
        },
      },
    });
    await inbox.start();
    const p = f.stream.prefix;
    await publishEvents(
      f.stream.nc,
      [1, 2, 3].flatMap((version) => keys.map((key) => ferryEvent(p, { key, version }))),
    );
    // Ends when every effect is there, or as soon as a head failed for good (what the old count did).
    await waitFor(async () => (await f.effects()).length === keys.length * 3 || (await jobsIn(f, 'failed')) > 0, {
      what: 'every key applied, or a parked head failed',
      timeoutMs: 180_000,
      intervalMs: 200,
    });
    assert.equal(await jobsIn(f, 'failed'), 0, 'no head failed for good');
    const { rows } = await f.db.pool.query<{ key: string; versions: string[] }>(
      `SELECT e.key, array_agg(e.version::text ORDER BY e.applied_at, e.version) AS versions FROM ${f.s}.effects e GROUP BY e.key ORDER BY e.key`,
    );
    assert.deepEqual(
      rows,
      keys.map((key) => ({ key, versions: ['1', '2', '3'] })),
      'every key applied 1, 2, 3 in that order',
    );
    // Every key failed its 4 tries and applied on the 5th: one more than the old count allowed.
    assert.deepEqual(
      [...calls.entries()].sort(),
      keys.map((key) => [key, FAILURES + 3]),
    );
    const versions = await f.db.pool.query<{ version: string; parked: number }>(
      `SELECT DISTINCT v.version::text AS version, v.parked FROM ${f.s}.inbox_versions v WHERE v.consumer = 'billing'`,
    );
    assert.deepEqual(versions.rows, [{ version: '3', parked: 0 }]);
  });

  test('inbox retry span - a handler that keeps failing is retried through the span, then its head fails for good and holds its key', async () => {
    const f = await inboxFixture();
    fixtures.push(f);
    const tries: number[] = [];
    const inbox = f.inbox({
      mode: 'sequential',
      maxDeliver: 1,
      parkRetryLimit: 0,
      parkRetryDelayMs: 1_000,
      // Retries after at least 1 s and 2 s (park-retry.ts): three tries in the parking lot.
      retrySpanMs: 3_000,
      handlers: {
        Set: async (event) => {
          if (event.version === 1n) tries.push(Date.now());
          throw new Error('still broken');
        },
      },
    });
    await inbox.start();
    const p = f.stream.prefix;
    await publishEvents(f.stream.nc, [ferryEvent(p, { key: 'a', version: 1 }), ferryEvent(p, { key: 'a', version: 2 })]);
    await waitFor(async () => (await jobsIn(f, 'failed')) === 1, { what: 'the head a/1 failed for good', timeoutMs: 60_000 });
    const [fromStream, ...inPark] = tries;
    assert.ok(fromStream !== undefined);
    assert.equal(inPark.length, 3, 'one try in the parking lot and two retries (parkRetryLimit 0 alone gave one)');
    const first = inPark[0] ?? 0;
    const last = inPark.at(-1) ?? 0;
    assert.ok(last - first >= 3_000, `the retries spanned ${last - first} ms, at least retrySpanMs`);
    // The failed head holds its key: v2 waits behind it, unapplied.
    assert.deepEqual(await f.effects(), []);
    const row = await f.db.pool.query<{ version: string; parked: number }>(
      `SELECT v.version::text AS version, v.parked FROM ${f.s}.inbox_versions v WHERE v.consumer = 'billing' AND v.key = 'a'`,
    );
    assert.deepEqual(row.rows, [{ version: '0', parked: 2 }]);
  });
});
