/**
 * Commit-to-stream latency of the relay at a steady 1,000 events/s (200
 * transactions/s of 5 events each), and at a trickle of 20 events/s (one per
 * transaction), each with LISTEN/NOTIFY and with polling only, in one run.
 * Latency is measured from the producer's COMMIT returning to the message
 * arriving at an ordered JetStream consumer in the same process: it is the
 * commit-to-PubAck time plus one local delivery (well under a millisecond).
 *
 *   npm run build && node bench/dist/relay-latency.js [--quick]
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createRelay } from '@ferry/relay';
import { createTestDatabase, createTestStream } from '@ferry/testkit';
import { jetstream } from '@nats-io/jetstream';
import { hasFlag, percentile, printTable, writeResult } from './lib/stats.js';

const QUICK = hasFlag('quick');
const RATE = 1000; // events per second
const SECONDS = QUICK ? 5 : 20;
const WARMUP_SECONDS = 1;
const PER_TX = 5;
/** A trickle as well: where the idle poll backs off to --poll-interval-ms, LISTEN should matter. */
const LOW_RATE = 20;
const LOW_SECONDS = QUICK ? 5 : 15;
const CONCURRENCY = 16; // producer transactions in flight at most

async function scenario(listen: boolean, rate: number, perTx: number, seconds: number) {
  const db = await createTestDatabase({ prefix: 'bench_lat', lanes: 16, max: CONCURRENCY + 2 });
  const stream = await createTestStream({ prefix: `benchlat${listen ? 'l' : 'p'}` });
  const committed = new Map<string, number>();
  const arrived = new Map<string, number>();
  const latencies: number[] = [];
  let received = 0;
  const consumer = await jetstream(stream.nc).consumers.get(stream.name);
  const messages = await consumer.consume();
  const reading = (async () => {
    for await (const m of messages) {
      const id = m.headers?.get('ce-id') ?? '';
      const now = performance.now();
      received++;
      const at = committed.get(id);
      if (at === undefined)
        arrived.set(id, now); // before the COMMIT callback ran
      else {
        latencies.push(now - at);
        committed.delete(id);
      }
    }
  })();
  const relay = createRelay({
    databaseUrl: db.url,
    schema: db.schema,
    nats: { servers: stream.nc.getServer() },
    maintenance: false,
    listen,
  });
  await relay.start();
  const publisher = createPublisher({ schema: db.schema, source: 'bench', notify: listen });
  const total = rate * seconds;
  const warmup = rate * WARMUP_SECONDS;
  const start = performance.now();
  let inFlight = 0;
  let behind = 0;
  for (let i = 0; i < total; i += perTx) {
    const due = start + (i * 1000) / rate;
    const wait = due - performance.now();
    if (wait > 1) await sleep(wait);
    while (inFlight >= CONCURRENCY) await sleep(0);
    if (performance.now() - due > 50) behind++;
    inFlight++;
    const events = Array.from({ length: perTx }, (_, j) => ({
      subject: `${stream.prefix}.orders`,
      key: `order-${(i + j) % 500}`,
      type: 'OrderPlaced',
      data: { order: i + j },
    }));
    withTransaction(db.pool, (tx) => publisher.publishMany(tx, events))
      .then((results) => {
        if (i < warmup) return;
        const now = performance.now();
        for (const r of results) {
          const at = arrived.get(r.id);
          if (at === undefined) committed.set(r.id, now);
          else {
            latencies.push(Math.max(0, at - now));
            arrived.delete(r.id);
          }
        }
      })
      .finally(() => {
        inFlight--;
      });
  }
  const offered = total / ((performance.now() - start) / 1000);
  const deadline = Date.now() + 30_000;
  while (received < total && Date.now() < deadline) await sleep(20);
  messages.stop();
  await reading;
  await relay.stop();
  await stream.close();
  await db.close();
  const sorted = latencies.sort((a, b) => a - b);
  return {
    listen,
    offeredPerSecond: offered,
    measured: sorted.length,
    lateTransactions: behind,
    p50Ms: percentile(sorted, 50),
    p90Ms: percentile(sorted, 90),
    p99Ms: percentile(sorted, 99),
    maxMs: sorted.at(-1) ?? Number.NaN,
  };
}

const polling = await scenario(false, RATE, PER_TX, SECONDS);
const listening = await scenario(true, RATE, PER_TX, SECONDS);
const lowPolling = await scenario(false, LOW_RATE, 1, LOW_SECONDS);
const lowListening = await scenario(true, LOW_RATE, 1, LOW_SECONDS);
const row = (r: typeof polling, label: string) => [label, r.offeredPerSecond, r.p50Ms, r.p90Ms, r.p99Ms, r.maxMs, r.measured];
printTable(
  `relay commit-to-stream latency, ms (first ${WARMUP_SECONDS} s not counted; poll interval 500 ms)`,
  ['scenario', 'events/s offered', 'p50', 'p90', 'p99', 'max', 'measured'],
  [
    row(polling, `${RATE}/s, ${PER_TX} per tx, polling only (adaptive)`),
    row(listening, `${RATE}/s, ${PER_TX} per tx, LISTEN/NOTIFY + polling`),
    row(lowPolling, `${LOW_RATE}/s, 1 per tx, polling only (adaptive)`),
    row(lowListening, `${LOW_RATE}/s, 1 per tx, LISTEN/NOTIFY + polling`),
  ],
);
const file = writeResult('relay-latency', {
  steady: { rate: RATE, perTransaction: PER_TX, seconds: SECONDS, polling, listening },
  trickle: { rate: LOW_RATE, perTransaction: 1, seconds: LOW_SECONDS, polling: lowPolling, listening: lowListening },
});
console.log(`\nwrote ${file}`);
process.exit(0);
