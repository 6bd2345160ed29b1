/**
 * Scenario 3, commit-to-ack latency under a steady open-loop load. First the
 * capacity: producers publishing as fast as they can (closed loop) with a
 * relay running, measured as the rate events reach the stream. Then runs at
 * 10%, 50% and 90% of it, each with LISTEN/NOTIFY and with polling only
 * (order alternating): transactions of 5 events are started on a fixed
 * schedule whatever happened to the earlier ones (open loop), and each
 * event's latency is COMMIT returning in the producer to the message arriving
 * at a consumer in the same process (the PubAck plus one local delivery).
 * A run whose backlog keeps growing, or whose producers could not commit the
 * offered rate, is reported as unsustainable and its percentiles are not used.
 *
 *   node bench/dist/scenarios/relay-load.js [--quick] [--seconds 10] [--loads 10,50,90]
 */
import { quoteIdentifier, WIRE_HEADERS, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createTestDatabase, createTestStream, natsUrl } from '@ferry/testkit';
import { jetstream } from '@nats-io/jetstream';
import { benchFlags, until } from '../lib/args.js';
import { LatencyClock } from '../lib/latency.js';
import { startRelay } from '../lib/outbox.js';
import { percentile, printTable, writeResult } from '../lib/stats.js';
import { openLoop } from '../lib/writers.js';

const flags = benchFlags(
  'Commit-to-ack latency against offered load (% of the measured capacity), relay in process, LISTEN/NOTIFY and polling only; file storage.',
  {
    quick: 'a short run (2 s per load)',
    seconds: ['<s> seconds per run', 10, 2],
    loads: ['<n,n,…> offered load, % of capacity', [10, 50, 90]],
  },
);

const WARMUP_SECONDS = flags.quick ? 0.5 : 1;
const CAPACITY_SECONDS = flags.quick ? 1.5 : 5;
const PER_TX = 5;
const KEYS = 500;
const PRODUCERS = 16;

const db = await createTestDatabase({ prefix: 'bench_load', lanes: 16, max: PRODUCERS + 4 });
const s = quoteIdentifier(db.schema);
let keyRun = 0;

interface Run {
  committed: number;
  received: number;
  latencies: number[];
  backlog: Array<{ atMs: number; backlog: number }>;
  elapsedMs: number;
}

/**
 * One run with a fresh stream and relay. `rate` events/s on a schedule, or
 * undefined for the closed loop (PRODUCERS loops as fast as they commit).
 */
async function oneRun(listen: boolean, rate: number | undefined, seconds: number, warmupSeconds: number): Promise<Run> {
  await db.pool.query(`TRUNCATE ${s}.outbox, ${s}.key_versions`);
  const stream = await createTestStream({ prefix: 'benchload', storage: 'file' });
  const prefix = `k${keyRun++}-`;
  const clock = new LatencyClock();
  let committed = 0;
  let measuring = false;
  const consumer = await jetstream(stream.nc).consumers.get(stream.name);
  const messages = await consumer.consume();
  const reading = (async () => {
    for await (const m of messages) clock.arrived(m.headers?.get(WIRE_HEADERS.id) ?? '');
  })();
  const { relay } = await startRelay({ databaseUrl: db.url, schema: db.schema, nats: { servers: natsUrl() }, listen });
  const publisher = createPublisher({ schema: db.schema, source: 'bench', notify: listen });
  let n = 0;
  const commitOne = async () => {
    const i = n;
    n += PER_TX;
    const events = Array.from({ length: PER_TX }, (_, j) => ({
      subject: `${stream.prefix}.orders`,
      key: `${prefix}${(i + j) % KEYS}`,
      type: 'OrderPlaced',
      data: { order: i + j, amount: 4200, currency: 'EUR' },
    }));
    const results = await withTransaction(db.pool, (tx) => publisher.publishMany(tx, events));
    committed += PER_TX;
    clock.committed(
      results.map((r) => r.id),
      measuring,
    );
  };
  const start = performance.now();
  const end = start + seconds * 1000;
  const backlog: Array<{ atMs: number; backlog: number }> = [];
  const sampler = setInterval(() => backlog.push({ atMs: performance.now() - start, backlog: committed - clock.received }), 100);
  const warmEnd = start + warmupSeconds * 1000;
  const warm = setTimeout(() => {
    measuring = true;
  }, warmupSeconds * 1000);
  let receivedAtWarm = 0;
  const markWarm = setTimeout(() => {
    receivedAtWarm = clock.received;
  }, warmupSeconds * 1000);
  try {
    if (rate === undefined) {
      await Promise.all(
        Array.from({ length: PRODUCERS }, async () => {
          while (performance.now() < end) await commitOne();
        }),
      );
    } else {
      await openLoop(rate, PER_TX, seconds, commitOne);
    }
    const elapsedMs = performance.now() - start;
    const receivedAtEnd = clock.received;
    clearInterval(sampler);
    await until(() => clock.received >= committed, 'the relay to catch up', 60_000);
    const measuredSeconds = (Math.min(end, performance.now()) - Math.max(warmEnd, start)) / 1000;
    return {
      committed,
      received: rate === undefined ? (receivedAtEnd - receivedAtWarm) / measuredSeconds : clock.received,
      latencies: clock.latencies,
      backlog,
      elapsedMs,
    };
  } finally {
    clearInterval(sampler);
    clearTimeout(warm);
    clearTimeout(markWarm);
    messages.stop();
    await reading;
    await relay.stop();
    await stream.close();
  }
}

const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);

try {
  await oneRun(true, 500, flags.quick ? 0.3 : 1, 0); // warm-up
  const cap = await oneRun(true, undefined, CAPACITY_SECONDS, Math.min(1, CAPACITY_SECONDS / 4));
  const capacity = cap.received; // events/s reaching the stream while producers go flat out
  console.log(`capacity: ${capacity.toFixed(0)} events/s reach the stream with ${PRODUCERS} closed-loop producers`);

  const runs = [];
  for (const [i, load] of flags.loads.entries()) {
    const modes = i % 2 === 0 ? [true, false] : [false, true];
    for (const listen of modes) {
      const rate = (capacity * load) / 100;
      const r = await oneRun(listen, rate, flags.seconds, WARMUP_SECONDS);
      const offered = rate * flags.seconds;
      const achievedRatio = r.committed / offered;
      // Growing backlog: the last fifth of the run holds much more than the second fifth, and more than half a second of events.
      const fifth = (flags.seconds * 1000) / 5;
      const early = mean(r.backlog.filter((b) => b.atMs >= fifth && b.atMs < 2 * fifth).map((b) => b.backlog));
      const late = mean(r.backlog.filter((b) => b.atMs >= 4 * fifth).map((b) => b.backlog));
      const growing = late > Math.max(2 * early, rate * 0.5);
      const sustainable = achievedRatio >= 0.95 && !growing;
      const sorted = r.latencies.sort((a, b) => a - b);
      runs.push({
        loadPercent: load,
        listen,
        offeredPerSec: rate,
        committedPerSec: r.committed / (r.elapsedMs / 1000),
        sustainable,
        why: sustainable
          ? ''
          : achievedRatio < 0.95
            ? `producers committed ${(achievedRatio * 100).toFixed(0)}% of the offered events`
            : `backlog grew from ${early.toFixed(0)} to ${late.toFixed(0)}`,
        backlogEarly: early,
        backlogLate: late,
        measured: sorted.length,
        p50Ms: percentile(sorted, 50),
        p90Ms: percentile(sorted, 90),
        p99Ms: percentile(sorted, 99),
        p999Ms: percentile(sorted, 99.9),
        maxMs: sorted.at(-1) ?? Number.NaN,
      });
    }
  }
  printTable(
    `Commit-to-ack latency, open loop, ${flags.seconds} s per run (first ${WARMUP_SECONDS} s not counted), ${PER_TX} events per transaction, capacity ${capacity.toFixed(0)} ev/s; ms`,
    ['load', 'wake-up', 'offered ev/s', 'p50', 'p99', 'p99.9', 'max', 'n', 'sustainable'],
    runs.map((r) => [
      `${r.loadPercent}%`,
      r.listen ? 'LISTEN' : 'polling',
      r.offeredPerSec,
      r.p50Ms,
      r.p99Ms,
      r.p999Ms,
      r.maxMs,
      r.measured,
      r.sustainable ? 'yes' : `NO: ${r.why}`,
    ]),
  );
  const file = writeResult('relay-load', {
    scenario: 'relay-load',
    params: {
      seconds: flags.seconds,
      warmupSeconds: WARMUP_SECONDS,
      perTx: PER_TX,
      keys: KEYS,
      producers: PRODUCERS,
      loads: flags.loads,
      quick: flags.quick,
    },
    capacityPerSec: capacity,
    runs,
  });
  console.log(`wrote ${file}`);
} finally {
  await db.close();
}
process.exit(0);
