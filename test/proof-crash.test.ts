// Failure proofs (issue 7): crashes. The relay is SIGKILLed between a PubAck
// and its mark (a test fixture's fault hook, fixtures/relay-exit-after-ack.ts); an inbox consumer
// is SIGKILLed in the middle of a handler. Both against a private nats-server.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createTestDatabase, createTestStream, NatsServer, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import {
  type ConsumerProcess,
  effectCounts,
  effectTablesSql,
  outboxCounts,
  publishSets,
  startConsumer,
  startRelay,
  startRelayExitingAfterAck,
  stopRelay,
  streamMessages,
  waitEffects,
} from './fixtures/proof-support.js';
import { assertExactlyOnceInKeyOrder, countPending, type RelayProcess, readStream } from './relay-helpers.js';

describe('failure proofs: crashes', () => {
  let nats: NatsServer;
  let db: TestDatabase;
  let stream: TestStream;
  const relays: RelayProcess[] = [];
  const consumers: ConsumerProcess[] = [];

  const consumerConfig = (consumer: string) => ({
    databaseUrl: db.url,
    natsUrl: nats.url,
    schema: db.schema,
    bossSchema: `${db.schema}_boss`,
    stream: stream.name,
    consumer,
    ackWaitMs: 1500,
  });

  before(async () => {
    nats = await NatsServer.start();
    db = await createTestDatabase({ prefix: 'proof_crash', migrate: ['outbox', 'inbox'], lanes: 4 });
    await db.pool.query(effectTablesSql(db.schema));
    stream = await createTestStream({ servers: nats.url, prefix: 'proofcrash', storage: 'file' });
  });

  after(async () => {
    for (const c of consumers) await c.kill();
    for (const r of relays) await stopRelay(r);
    await stream?.close();
    await nats?.stop();
    await db?.pool.query(`DROP SCHEMA IF EXISTS "${db.schema}_boss" CASCADE`).catch(() => {});
    await db?.close();
  });

  test('proof - a relay killed after the PubAck and before the mark re-sends on restart; the stream drops the re-sends and nothing is applied twice', async () => {
    const consumer = await startConsumer(consumerConfig('lost'));
    consumers.push(consumer);
    const committed = 300;
    const ids = (
      await publishSets(
        db.pool,
        db.schema,
        stream.prefix,
        Array.from({ length: committed }, (_, i) => ({ key: `k${i % 12}` })),
      )
    ).map((r) => r.id);

    const faulty = startRelayExitingAfterAck(db.url, db.schema, nats.url);
    relays.push(faulty);
    const exit = await faulty.exited;
    assert.equal(exit.signal, 'SIGKILL', `the fault hook killed the relay: ${faulty.output()}`);
    const inStream = await streamMessages(stream.nc, stream.name);
    const { pending } = await outboxCounts(db.pool, db.schema);
    const ackedNotMarked = inStream - (committed - pending);
    assert.ok(
      ackedNotMarked > 0,
      `rows acknowledged by JetStream but not marked: ${ackedNotMarked} (stream ${inStream}, pending ${pending})`,
    );

    const relay = startRelay(db.url, db.schema, nats.url);
    relays.push(relay);
    await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 20_000, what: 'the outbox to drain' });
    assert.equal(await streamMessages(stream.nc, stream.name), committed, 'stream messages = committed events: the re-sends were dropped');
    assertExactlyOnceInKeyOrder(await readStream(stream.nc, stream.name), ids);

    const effects = await waitEffects(db.pool, db.schema, 'lost', committed);
    assert.deepEqual(effects, { effects: committed, doubled: 0, totals: committed }, 'each event applied once');
    // The child reports each outcome after its COMMIT and ack, so the last report may trail the effect row.
    await waitFor(() => consumer.reports.filter((r) => r.kind === 'applied').length >= committed, {
      timeoutMs: 10_000,
      what: 'the consumer to report every event applied',
    });
    assert.equal(consumer.reports.filter((r) => r.kind === 'applied').length, committed);
  });

  test('proof - an inbox consumer killed in the middle of a handler applies the effect exactly once after restart, never half', async () => {
    // The events of the first test are in the stream; a new consumer applies them all, and hangs in k5's 10th.
    const committed = await streamMessages(stream.nc, stream.name);
    const hang = { key: 'k5', version: '10' };
    // sequential: the later versions of k5 wait for the killed one (latest would let them overtake it).
    const first = await startConsumer({ ...consumerConfig('crash'), mode: 'sequential', hang });
    consumers.push(first);
    const inHandler = await first.waitReport('in-handler').catch((err) => {
      throw new Error(`${err.message}: ${first.output().slice(-2000)}`);
    });
    assert.deepEqual([inHandler.key, String(inHandler.version)], [hang.key, hang.version]);
    await first.kill('SIGKILL');
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS n FROM "${db.schema}".effects WHERE consumer = 'crash' AND key = $1 AND version = $2`,
      [hang.key, hang.version],
    );
    assert.equal(rows[0]?.n, 0, 'the half-written effect of the killed handler is not visible');
    const half = await effectCounts(db.pool, db.schema, 'crash');
    assert.ok(half.effects < committed, `the consumer died before finishing (${half.effects} of ${committed})`);
    assert.equal(half.effects, half.totals, 'no half effect: both parts or neither');

    const second = await startConsumer({ ...consumerConfig('crash'), mode: 'sequential' });
    consumers.push(second);
    const effects = await waitEffects(db.pool, db.schema, 'crash', committed).catch(async (err) => {
      const dbg = await db.pool.query(
        `SELECT consumer, count(*)::int n FROM "${db.schema}".effects GROUP BY 1 UNION ALL SELECT 'v:' || consumer, count(*)::int FROM "${db.schema}".inbox_versions GROUP BY 1`,
      );
      throw new Error(`${err.message}\n${JSON.stringify(dbg.rows)}\nrestarted consumer: ${second.output().slice(-3000)}`);
    });
    await new Promise((r) => setTimeout(r, 2000)); // one more ack wait: a redelivery would show here
    assert.deepEqual(await effectCounts(db.pool, db.schema, 'crash'), { effects: committed, doubled: 0, totals: committed });
    assert.equal(effects.doubled, 0);
    assert.ok(
      second.reports.some((r) => r.kind === 'applied' && r.key === hang.key && String(r.version) === hang.version),
      'the restarted consumer applied the killed handler’s event',
    );
  });
});
