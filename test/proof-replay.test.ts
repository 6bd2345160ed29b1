// Failure proofs (issue 7): replays and the retention boundary. The `ferry
// relay` binary and the inbox consumers run as child processes.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { quoteIdentifier } from '@ferry/core';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import {
  type ConsumerProcess,
  effectCounts,
  effectTablesSql,
  publishSets,
  startConsumer,
  startRelay,
  stopRelay,
  streamMessages,
  waitEffects,
} from './fixtures/proof-support.js';
import { countPending, type RelayProcess } from './relay-helpers.js';

describe('failure proofs: replay and retention', () => {
  let db: TestDatabase;
  const streams: TestStream[] = [];
  const relays: RelayProcess[] = [];
  const consumers: ConsumerProcess[] = [];
  let s: string;

  const consumer = async (stream: TestStream, name: string) => {
    const c = await startConsumer({
      databaseUrl: db.url,
      natsUrl: stream.nc.getServer(),
      schema: db.schema,
      bossSchema: `${db.schema}_boss`,
      stream: stream.name,
      consumer: name,
    });
    consumers.push(c);
    return c;
  };
  const finalState = async (name: string) =>
    (
      await db.pool.query(`SELECT key, last_version::text AS v, applied::int AS n FROM ${s}.totals WHERE consumer = $1 ORDER BY key`, [
        name,
      ])
    ).rows;

  before(async () => {
    db = await createTestDatabase({ prefix: 'proof_replay', migrate: ['outbox', 'inbox'], lanes: 4 });
    s = quoteIdentifier(db.schema);
    await db.pool.query(effectTablesSql(db.schema));
  });

  after(async () => {
    for (const c of consumers) await c.kill();
    for (const r of relays) await stopRelay(r);
    for (const st of streams) await st.close();
    await db?.pool.query(`DROP SCHEMA IF EXISTS "${db.schema}_boss" CASCADE`).catch(() => {});
    await db?.close();
  });

  test('proof - the whole stream replayed into the existing consumer is a no-op, and into a new consumer rebuilds the same state', async () => {
    const stream = await createTestStream({ prefix: 'proofreplay' });
    streams.push(stream);
    const committed = 240;
    await publishSets(
      db.pool,
      db.schema,
      stream.prefix,
      Array.from({ length: committed }, (_, i) => ({ key: `r${i % 8}` })),
    );
    const relay = startRelay(db.url, db.schema, stream.nc.getServer());
    relays.push(relay);
    const main = await consumer(stream, 'main');
    await waitEffects(db.pool, db.schema, 'main', committed);
    const before = await finalState('main');
    await main.kill('SIGTERM');

    // Replay into the existing consumer: its durable is recreated and the stream is delivered from the start again.
    await stream.jsm.consumers.delete(stream.name, 'main');
    const again = await consumer(stream, 'main');
    await waitFor(() => again.reports.filter((r) => r.kind === 'stale' || r.kind === 'duplicate').length === committed, {
      timeoutMs: 30_000,
      what: 'every replayed message to be dropped',
    });
    assert.equal(again.reports.filter((r) => r.kind === 'applied').length, 0, 'nothing applied again');
    assert.deepEqual(await effectCounts(db.pool, db.schema, 'main'), { effects: committed, doubled: 0, totals: committed });
    assert.deepEqual(await finalState('main'), before, 'the state is unchanged');

    // Replay into a new consumer: the same final state.
    await consumer(stream, 'rebuilt');
    await waitEffects(db.pool, db.schema, 'rebuilt', committed);
    await sleep(500);
    assert.deepEqual(await finalState('rebuilt'), before, 'a new consumer rebuilds the same state');
    assert.deepEqual(await effectCounts(db.pool, db.schema, 'rebuilt'), { effects: committed, doubled: 0, totals: committed });
  });

  test('proof - a re-send after the row was pruned and the duplicate window passed is dropped by the inbox by version', async () => {
    const windowMs = 1000;
    const stream = await createTestStream({ prefix: 'proofretain', duplicateWindowMs: windowMs });
    streams.push(stream);
    const published = await publishSets(db.pool, db.schema, stream.prefix, [{ key: 'ret' }, { key: 'ret' }, { key: 'ret' }]);
    const relay = startRelay(db.url, db.schema, stream.nc.getServer());
    relays.push(relay);
    const c = await consumer(stream, 'retention');
    await waitEffects(db.pool, db.schema, 'retention', 3);
    await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { what: 'the outbox to drain' });

    // The row of version 2 is pruned (as the relay's prune job deletes published rows past retention) …
    const v2 = published[1]?.id;
    const { rows } = await db.pool.query(
      `DELETE FROM ${s}.outbox o WHERE o.id = $1 AND EXISTS (SELECT 1 FROM ${s}.outbox_published d WHERE d.seq = o.seq) RETURNING o.*`,
      [v2],
    );
    assert.equal(rows.length, 1);
    // … the duplicate window passes, and the same event (id, key, version) is sent again.
    await sleep(windowMs + 500);
    const r = rows[0] as Record<string, unknown>;
    await db.pool.query(
      `INSERT INTO ${s}.outbox (id, key, version, subject, type, source, content_type, data, headers, occurred_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
      [r.id, r.key, r.version, r.subject, r.type, r.source, r.content_type, r.data, r.headers, r.occurred_at],
    );
    await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { what: 'the re-send to be published' });
    assert.equal(await streamMessages(stream.nc, stream.name), 4, 'past its duplicate window the stream keeps the re-send');
    const dropped = await c.waitReport('stale');
    assert.deepEqual([dropped.id, dropped.version], [v2, '2'], 'the inbox dropped the re-sent version 2 as stale (3 is recorded)');
    await sleep(500);
    assert.deepEqual(await effectCounts(db.pool, db.schema, 'retention'), { effects: 3, doubled: 0, totals: 3 }, 'no second effect');
  });
});
