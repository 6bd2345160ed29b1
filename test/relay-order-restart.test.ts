// Guarantee 2 through the commonest fault (issue 12): nats-server SIGKILLed and restarted three times while
// `ferry relay` drains 20 keys x 2,500 versions with a large in-flight window. Rows in flight at a kill
// time out and are retried after the reconnect; with pipelining per key they used to land after later
// versions (5,000-6,032 order violations per run). Afterwards every key's versions must be strictly
// increasing in stream order, none missing, none twice.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createTestDatabase, createTestStream, NatsServer, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import { startRelay, stopRelay } from './fixtures/proof-support.js';
import { assertExactlyOnceInKeyOrder, countPending, publishEvents, type RelayProcess, readStream } from './relay-helpers.js';

const KEYS = 20;
const VERSIONS = 2500;

describe('relay per-key order through NATS restarts mid-pipeline', () => {
  let nats: NatsServer;
  let db: TestDatabase;
  let stream: TestStream;
  let relay: RelayProcess | undefined;

  before(async () => {
    nats = await NatsServer.start();
    db = await createTestDatabase({ prefix: 'order_restart', lanes: 4 });
    stream = await createTestStream({ servers: nats.url, prefix: 'restart', storage: 'file' });
  });

  after(async () => {
    if (relay) await stopRelay(relay);
    await stream?.close().catch(() => {});
    await nats?.stop();
    await db?.close();
  });

  test('relay order - three NATS kills during a pipelined drain leave every key in order, each event once', async () => {
    const ids = await publishEvents(db.pool, db.schema, stream.prefix, KEYS * VERSIONS, { keys: KEYS, perTx: 1000 });
    relay = startRelay(db.url, db.schema, nats.url, {}, [
      '--max-in-flight',
      '20000',
      '--batch-size',
      '2000',
      '--publish-timeout-ms',
      '2000',
      '--breaker-cooldown-ms',
      '500',
      '--max-attempts',
      '1000',
    ]);
    const total = ids.length;
    for (const fraction of [0.1, 0.4, 0.7]) {
      await waitFor(async () => (await countPending(db.pool, db.schema)) <= total * (1 - fraction), {
        timeoutMs: 60_000,
        intervalMs: 20,
        what: `${fraction * 100}% of the backlog to be published`,
      });
      await nats.kill('SIGKILL');
      await sleep(300);
      await nats.restart();
    }
    await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 120_000, what: 'the outbox to drain' });
    assert.equal(relay.proc.exitCode, null, `the relay kept running: ${relay.output().slice(-2000)}`);
    const events = await waitFor(() => readStream(stream.nc, stream.name, 60_000), {
      timeoutMs: 30_000,
      intervalMs: 500,
      what: 'the stream to be readable after the restarts',
    });
    assertExactlyOnceInKeyOrder(events, ids);
  });
});
