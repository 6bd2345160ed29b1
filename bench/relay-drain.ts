/**
 * Relay drain throughput: a backlog of N events (100,000; --quick 10,000)
 * drained by one relay instance, against raw pipelined JetStream publishing
 * of the same encoded messages from one Node connection (same window of
 * unacknowledged messages), in the same run. The ratio relay / raw is the
 * figure (target >= 0.8).
 *
 *   npm run build && node bench/dist/relay-drain.js [--quick]
 */
import { encodeEvent, eventFromOutboxRow, type OutboxEventRow, quoteIdentifier, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createRelay } from '@ferry/relay';
import { createTestDatabase, createTestStream } from '@ferry/testkit';
import { jetstream } from '@nats-io/jetstream';
import { headers } from '@nats-io/transport-node';
import { hasFlag, printTable, summarize, writeResult } from './lib/stats.js';

const QUICK = hasFlag('quick');
const EVENTS = QUICK ? 10_000 : 100_000;
const KEYS = 1000;
const TRIALS = QUICK ? 1 : 3;
const WINDOW = 5000; // the relay's default --max-in-flight
const BATCH = 500; // the relay's default --batch-size

async function trial(n: number) {
  const db = await createTestDatabase({ prefix: 'bench_drain', lanes: 16, max: 8 });
  const stream = await createTestStream({ prefix: `benchdrain${n}`, duplicateWindowMs: 120_000 });
  const raw = await createTestStream({ prefix: `benchraw${n}`, duplicateWindowMs: 120_000 });
  try {
    // The backlog (not timed).
    const publisher = createPublisher({ schema: db.schema, source: 'bench' });
    for (let start = 0; start < EVENTS; start += 1000) {
      await withTransaction(db.pool, (tx) =>
        publisher.publishMany(
          tx,
          Array.from({ length: Math.min(1000, EVENTS - start) }, (_, i) => ({
            subject: `${stream.prefix}.orders`,
            key: `order-${(start + i) % KEYS}`,
            type: 'OrderPlaced',
            data: { order: start + i, amount: 4200, currency: 'EUR', lines: [{ sku: 'A-1', qty: 2 }] },
          })),
        ),
      );
    }
    await db.pool.query(`VACUUM ANALYZE ${quoteIdentifier(db.schema)}.outbox`);

    // Raw: the same messages, encoded the same way, pipelined on one connection.
    const { rows } = await db.pool.query<OutboxEventRow>(
      `SELECT id::text, key, version::text, subject, type, source, content_type, data, headers, occurred_at FROM ${quoteIdentifier(db.schema)}.outbox ORDER BY seq`,
    );
    const js = jetstream(raw.nc);
    const rawStart = performance.now();
    let next = 0;
    const worker = async () => {
      while (next < rows.length) {
        const r = rows[next++];
        if (!r) break;
        const enc = encodeEvent({ ...eventFromOutboxRow(r), subject: r.subject.replace(stream.prefix, raw.prefix) });
        const h = headers();
        for (const [k, v] of enc.headers) h.set(k, v);
        await js.publish(enc.subject, enc.body, { headers: h });
      }
    };
    await Promise.all(Array.from({ length: WINDOW }, worker));
    const rawSeconds = (performance.now() - rawStart) / 1000;

    // Relay: from start (lanes leased) to the last batch marked.
    let marked = 0;
    let done: () => void = () => {};
    const finished = new Promise<void>((resolve) => {
      done = resolve;
    });
    const relay = createRelay({
      databaseUrl: db.url,
      schema: db.schema,
      nats: { servers: stream.nc.getServer() },
      maintenance: false,
      listen: false,
      batchSize: BATCH,
      maxInFlight: WINDOW,
    });
    relay.on('relay:batch:published', (e) => {
      marked += e.published;
      if (marked >= EVENTS) done();
    });
    const relayStart = performance.now();
    await relay.start();
    await finished;
    const relaySeconds = (performance.now() - relayStart) / 1000;
    await relay.stop();
    const stored = (await stream.jsm.streams.info(stream.name)).state.messages;
    if (stored !== EVENTS) throw new Error(`stream holds ${stored} messages, expected ${EVENTS}`);
    return { rawPerSecond: EVENTS / rawSeconds, relayPerSecond: EVENTS / relaySeconds };
  } finally {
    await raw.close();
    await stream.close();
    await db.close();
  }
}

const results = [];
for (let i = 0; i < TRIALS; i++) results.push(await trial(i));
const raw = summarize(results.map((r) => r.rawPerSecond));
const relay = summarize(results.map((r) => r.relayPerSecond));
const ratios = summarize(results.map((r) => r.relayPerSecond / r.rawPerSecond));
printTable(
  `relay drain of a ${EVENTS.toLocaleString('en')}-event backlog (${KEYS} keys, 16 lanes, batch ${BATCH}, window ${WINDOW}), ${TRIALS} trial(s), median`,
  ['path', 'events/s', 'min', 'max'],
  [
    ['raw pipelined JetStream publish (one connection)', raw.median, raw.min, raw.max],
    ['ferry relay (claim, publish, await PubAcks, mark)', relay.median, relay.min, relay.max],
    ['ratio relay / raw (target >= 0.8)', ratios.median, ratios.min, ratios.max],
  ],
);
const file = writeResult('relay-drain', {
  events: EVENTS,
  keys: KEYS,
  batch: BATCH,
  window: WINDOW,
  trials: results,
  raw,
  relay,
  ratio: ratios,
});
console.log(`\nwrote ${file}`);
process.exit(0);
