import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { quoteIdentifier } from '@ferry/core';
import { createRelay, type Relay } from '@ferry/relay';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import { assertExactlyOnceInKeyOrder, countPending, publishEvents, readStream } from './relay-helpers.js';

/** A schema with `lanes` lanes and a stream of the suite's own, and its relay started with `options` (one key per claim at most). */
function fixture(prefix: string, lanes: number) {
  const f: { db: TestDatabase; stream: TestStream; relay?: Relay; start(o: { batchSize: number; maxInFlight: number }): Promise<void> } = {
    db: undefined as unknown as TestDatabase,
    stream: undefined as unknown as TestStream,
    async start(o) {
      f.relay = createRelay({
        databaseUrl: f.db.url,
        schema: f.db.schema,
        nats: { servers: f.stream.nc.getServer() },
        maintenance: false,
        ...o,
      });
      await f.relay.start();
    },
  };
  before(async () => {
    f.db = await createTestDatabase({ prefix: `relay_${prefix}`, lanes });
    f.stream = await createTestStream({ prefix: `relay${prefix.replaceAll('_', '')}` });
  });
  after(async () => {
    await f.relay?.stop();
    await f.stream?.close();
    await f.db?.close();
  });
  return f;
}

describe('relay claims are fair across lanes', () => {
  const f = fixture('fair', 4);

  test('relay - with fewer keys per claim than lanes with work, a busy lane does not starve the others', async () => {
    // One row per key, so no chain runs long; then lane 0 keeps 300 rows and every other lane one.
    const all = await publishEvents(f.db.pool, f.db.schema, f.stream.prefix, 2000, { keys: 2000, perTx: 500, keyPrefix: 'fair-' });
    const s = quoteIdentifier(f.db.schema);
    await f.db.pool.query(
      `DELETE FROM ${s}.outbox o USING (
         SELECT seq, lane, row_number() OVER (PARTITION BY lane ORDER BY seq) AS n FROM ${s}.outbox) r
       WHERE o.seq = r.seq AND r.n > CASE WHEN r.lane = 0 THEN 300 ELSE 1 END`,
    );
    const { rows: shape } = await f.db.pool.query<{ lane: number; n: number }>(
      `SELECT lane, count(*)::int AS n FROM ${s}.outbox GROUP BY lane ORDER BY lane`,
    );
    assert.deepEqual(shape, [
      { lane: 0, n: 300 },
      { lane: 1, n: 1 },
      { lane: 2, n: 1 },
      { lane: 3, n: 1 },
    ]);
    const kept = new Set((await f.db.pool.query<{ id: string }>(`SELECT id::text FROM ${s}.outbox`)).rows.map((r) => r.id));

    // One key per claim: the walk's order of lanes decides which lane's key is taken.
    await f.start({ batchSize: 1, maxInFlight: 2 });
    await waitFor(async () => (await countPending(f.db.pool, f.db.schema)) === 0, { timeoutMs: 60_000, what: 'the outbox to drain' });

    // When each single-row lane's row went out, lane 0 had most of its rows still to send.
    const { rows } = await f.db.pool.query<{ lane: number; before: number }>(
      `SELECT o.lane,
              (SELECT count(*)::int FROM ${s}.outbox z JOIN ${s}.outbox_published zd ON zd.seq = z.seq
                WHERE z.lane = 0 AND zd.published_at < d.published_at) AS before
         FROM ${s}.outbox o JOIN ${s}.outbox_published d ON d.seq = o.seq WHERE o.lane <> 0 ORDER BY o.lane`,
    );
    assert.equal(rows.length, 3);
    for (const r of rows) assert.ok(r.before < 150, `lane ${r.lane}'s row waited for ${r.before} of lane 0's 300 rows`);
    assertExactlyOnceInKeyOrder(
      await readStream(f.stream.nc, f.stream.name),
      all.filter((id) => kept.has(id)),
    );
  });
});

describe('relay claims are fair across the keys of a lane', () => {
  const f = fixture('fair_keys', 1);

  test('relay - each claim starts after the key claimed last in its lane, so the keys take turns', async () => {
    // Five keys of four rows each in one lane, and one row per claim: a claim that started from the
    // lane's first key every time would send fair-0's four rows, then fair-1's, and so on.
    const all = await publishEvents(f.db.pool, f.db.schema, f.stream.prefix, 20, { keys: 5, perTx: 20, keyPrefix: 'fair-' });
    await f.start({ batchSize: 1, maxInFlight: 1 });
    await waitFor(async () => (await countPending(f.db.pool, f.db.schema)) === 0, { timeoutMs: 60_000, what: 'the outbox to drain' });
    const sent = await readStream(f.stream.nc, f.stream.name);
    assertExactlyOnceInKeyOrder(sent, all);
    const rounds = [0, 1, 2, 3].map((r) => sent.slice(r * 5, r * 5 + 5).map((e) => e.key));
    for (const [r, keys] of rounds.entries()) {
      assert.deepEqual([...keys].sort(), ['fair-0', 'fair-1', 'fair-2', 'fair-3', 'fair-4'], `round ${r + 1} sent ${keys.join(', ')}`);
    }
  });
});
