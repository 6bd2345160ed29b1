// Failure proofs (issue 7): a three-node NATS cluster with an R3 stream. The
// stream leader is killed during load and restarted later; the `ferry relay`
// binary and an inbox consumer (child processes) reconnect on their own, and
// nothing is lost or duplicated.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createTestDatabase, freePort, NatsServer, type TestDatabase, uniqueName, waitFor } from '@ferry/testkit';
import { type JetStreamManager, jetstreamManager, RetentionPolicy, StorageType } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import {
  type ConsumerProcess,
  effectCounts,
  effectTablesSql,
  publishSets,
  startConsumer,
  startRelay,
  startRelayExitingAfterAck,
  stopRelay,
  waitEffects,
} from './fixtures/proof-support.js';
import { assertExactlyOnceInKeyOrder, countPending, publishEvents, type RelayProcess, readStream } from './relay-helpers.js';

describe('failure proofs: a three-node NATS cluster', () => {
  const nodes: NatsServer[] = [];
  let db: TestDatabase;
  let nc: NatsConnection;
  let jsm: JetStreamManager;
  let relay: RelayProcess | undefined;
  let consumer: ConsumerProcess | undefined;
  const stream = uniqueName('CLUSTER').toUpperCase();
  const prefix = stream.toLowerCase();

  before(async () => {
    const routePorts = [await freePort(), await freePort(), await freePort()];
    const routes = routePorts.map((p) => `"nats-route://127.0.0.1:${p}"`).join(', ');
    // All three start together: JetStream needs a quorum of the cluster before it answers healthy.
    nodes.push(
      ...(await Promise.all(
        routePorts.map((port, i) =>
          NatsServer.start({
            name: `ferry-n${i + 1}`,
            config: `cluster { name: "ferry_test", listen: "127.0.0.1:${port}", routes: [${routes}] }`,
          }),
        ),
      )),
    );
    db = await createTestDatabase({ prefix: 'proof_cluster', migrate: ['outbox', 'inbox'], lanes: 4 });
    await db.pool.query(effectTablesSql(db.schema));
    nc = await connect({ servers: nodes.map((n) => n.url), name: 'proof-cluster', maxReconnectAttempts: -1, reconnectTimeWait: 250 });
    // Until the cluster elected a JetStream meta leader, JetStream API requests time out.
    jsm = await waitFor(() => jetstreamManager(nc, { timeout: 2000 }), {
      timeoutMs: 20_000,
      intervalMs: 250,
      what: 'JetStream in the cluster',
    });
    await waitFor(
      async () =>
        jsm.streams.add({
          name: stream,
          subjects: [`${prefix}.>`],
          storage: StorageType.File,
          retention: RetentionPolicy.Limits,
          num_replicas: 3,
          duplicate_window: 120_000 * 1_000_000,
        }),
      { timeoutMs: 20_000, intervalMs: 250, what: 'the R3 stream (a JetStream meta leader)' },
    );
  });

  after(async () => {
    await consumer?.kill();
    if (relay) await stopRelay(relay);
    await nc?.close().catch(() => {});
    for (const n of nodes) await n.stop();
    await db?.pool.query(`DROP SCHEMA IF EXISTS "${db.schema}_boss" CASCADE`).catch(() => {});
    await db?.close();
  });

  test('proof - with the stream leader killed during load (holding acknowledged, unmarked rows) and restarted, nothing is lost or duplicated and relay and inbox reconnect', async () => {
    const urls = nodes.map((n) => n.url);
    const relayFlags = ['--publish-timeout-ms', '2000', '--breaker-cooldown-ms', '500', '--max-attempts', '1000'];
    relay = startRelay(db.url, db.schema, urls.join(','), {}, relayFlags);
    consumer = await startConsumer({
      databaseUrl: db.url,
      natsUrl: urls,
      schema: db.schema,
      bossSchema: `${db.schema}_boss`,
      stream,
      consumer: 'cluster',
      mode: 'sequential',
      ackWaitMs: 3000,
    });
    const ids: string[] = [];
    const load = async (rounds: number) => {
      for (let r = 0; r < rounds; r++) {
        const results = await publishSets(
          db.pool,
          db.schema,
          prefix,
          Array.from({ length: 20 }, (_, i) => ({ key: `c${(r * 20 + i) % 16}` })),
        );
        ids.push(...results.map((x) => x.id));
        await sleep(50);
      }
    };
    await load(20);
    await waitEffects(db.pool, db.schema, 'cluster', 200, 30_000);

    // Rows acknowledged by the stream leader and not marked: a relay with the test-only fault hook
    // SIGKILLs itself after its first PubAck'd batch. Then that leader is killed too.
    await stopRelay(relay);
    await load(20);
    const faulty = startRelayExitingAfterAck(db.url, db.schema, urls.join(','));
    assert.equal((await faulty.exited).signal, 'SIGKILL', `the fault hook killed the relay: ${faulty.output().slice(-2000)}`);
    const leaderName = (await jsm.streams.info(stream)).cluster?.leader;
    const leader = nodes[Number(/^ferry-n([123])$/.exec(leaderName ?? '')?.[1]) - 1];
    assert.ok(leader, `the stream has a leader among the nodes: ${leaderName}`);
    const stored = (await jsm.streams.info(stream)).state.messages;
    const marked = ids.length - (await countPending(db.pool, db.schema));
    assert.ok(stored > marked, `the leader acknowledged rows that are not marked (stream ${stored}, marked ${marked})`);
    await leader.kill('SIGKILL');

    // A new relay re-sends them to the new leader, which drops them: the duplicate window is replicated.
    relay = startRelay(db.url, db.schema, urls.join(','), {}, relayFlags);
    await load(20); // load continues with two of three nodes
    await sleep(1000);
    await leader.restart();
    await load(10);

    await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 30_000, what: 'the outbox to drain' });
    // Right after the node rejoined, JetStream API requests may time out while leaders settle: retry.
    const events = await waitFor(() => readStream(nc, stream), { timeoutMs: 20_000, intervalMs: 500, what: 'the stream to be readable' });
    assertExactlyOnceInKeyOrder(events, ids);
    // When the killed node led the durable consumer, the inbox's pending pull is lost with it and the
    // client notices by missed heartbeats (nats.js consume(): up to ~30 s), then pulls again.
    const effects = await waitEffects(db.pool, db.schema, 'cluster', ids.length, 50_000);
    await sleep(1000);
    assert.deepEqual(await effectCounts(db.pool, db.schema, 'cluster'), { effects: ids.length, doubled: 0, totals: ids.length });
    assert.equal(effects.doubled, 0);
    assert.equal(relay.proc.exitCode, null, `the relay kept running: ${relay.output().slice(-2000)}`);
    assert.equal(consumer.proc.exitCode, null, 'the inbox consumer kept running');
    // The restarted node caught up: it answers with the whole stream.
    const direct = await connect({ servers: leader.url });
    try {
      await waitFor(async () => (await (await jetstreamManager(direct)).streams.info(stream)).state.messages === ids.length, {
        timeoutMs: 20_000,
        what: 'the restarted node to serve the whole stream',
      });
    } finally {
      await direct.close();
    }
  });
  test('proof - the stream leader killed mid-drain of a pipelined backlog leaves every key in order, each event once', async () => {
    if (relay) await stopRelay(relay);
    // A second stream, so the first test's events do not mix in; 10 keys x 800 versions committed up front.
    const drainStream = `${stream}_DRAIN`;
    const drainPrefix = `${prefix}_drain`;
    await waitFor(
      () =>
        jsm.streams.add({
          name: drainStream,
          subjects: [`${drainPrefix}.>`],
          storage: StorageType.File,
          retention: RetentionPolicy.Limits,
          num_replicas: 3,
          duplicate_window: 120_000 * 1_000_000,
        }),
      { timeoutMs: 20_000, intervalMs: 250, what: 'the R3 drain stream' },
    );
    const ids = await publishEvents(db.pool, db.schema, drainPrefix, 8000, { keys: 10, perTx: 1000, keyPrefix: 'drain-' });
    const urls = nodes.map((n) => n.url);
    relay = startRelay(db.url, db.schema, urls.join(','), {}, [
      '--publish-timeout-ms',
      '2000',
      '--breaker-cooldown-ms',
      '500',
      '--max-attempts',
      '1000',
      '--max-in-flight',
      '20000',
      '--batch-size',
      '2000',
    ]);
    const pendingOfDrain = async () => {
      const { rows } = await db.pool.query<{ n: string }>(
        `SELECT count(*)::text AS n FROM "${db.schema}".outbox_events WHERE published_at IS NULL AND id = ANY ($1::uuid[])`,
        [ids],
      );
      return Number(rows[0]?.n);
    };
    await waitFor(async () => (await pendingOfDrain()) <= 6000, { timeoutMs: 60_000, intervalMs: 20, what: 'a quarter of the drain' });
    const leaderName = (await jsm.streams.info(drainStream)).cluster?.leader;
    const leader = nodes[Number(/^ferry-n([123])$/.exec(leaderName ?? '')?.[1]) - 1];
    assert.ok(leader, `the drain stream has a leader among the nodes: ${leaderName}`);
    await leader.kill('SIGKILL');
    await sleep(1500);
    await leader.restart();
    await waitFor(async () => (await pendingOfDrain()) === 0, { timeoutMs: 90_000, what: 'the drain to finish' });
    const events = await waitFor(() => readStream(nc, drainStream), { timeoutMs: 30_000, intervalMs: 500, what: 'the drain stream' });
    assertExactlyOnceInKeyOrder(events, ids);
    assert.equal(relay.proc.exitCode, null, `the relay kept running: ${relay.output().slice(-2000)}`);
  });
});
