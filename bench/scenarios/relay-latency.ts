/**
 * Scenario 3, latency with the defaults a user gets: commit → message at a
 * plain NATS core subscriber on the subject, under open-loop load at 20 and
 * 1,000 events/s (5 events per transaction, started on a fixed schedule
 * whatever happened to the earlier ones). The relay is `ferry relay` as a
 * separate process with no tuning flag; the publisher is
 * `createPublisher({ schema, source })` (notify at its default), and beside it
 * `notify: true`. Each event's latency runs from its transaction's COMMIT
 * returning in this process to its message reaching the subscriber (also in
 * this process, so one clock); a message that arrives first counts as 0.
 * File-storage stream. The first second of each run is not counted.
 *
 * Beside the percentiles, what the run cost over its whole open loop: the
 * share of the machine's cores that were busy (every process: this one, the
 * relay, PostgreSQL, nats-server), and the relay process's CPU and its
 * PostgreSQL backends' CPU per 1,000 events committed. A tail that grows with
 * the machine's load is CPU contention, not a wait in the relay.
 *
 * The flags after --storage change one thing at a time from what users get,
 * to find out where a difference comes from (`--in-process`: createRelay in
 * this process, as the old bench did; `--subscriber jetstream`: an ordered
 * JetStream consumer instead of a core subscription; `--relay-args`: tuning
 * flags for the relay process).
 */

import { WIRE_HEADERS, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createRelay } from '@ferry/relay';
import { createTestDatabase, createTestStream, natsUrl } from '@ferry/testkit';
import { jetstream } from '@nats-io/jetstream';
import { arg, declareFlags, hasFlag, listArg, numArg, until } from '../lib/args.js';
import { LatencyClock } from '../lib/latency.js';
import { machineBusySeconds } from '../lib/proc.js';
import { cpuMeter, relayCommandLine, startRelayProcesses } from '../lib/relay-process.js';
import { percentile, printTable, writeResult } from '../lib/stats.js';
import { openLoop } from '../lib/writers.js';

declareFlags(
  'node bench/dist/scenarios/relay-latency.js',
  'Commit → message at a plain NATS subscriber with the defaults a user gets (ferry relay process, no tuning flags; publisher notify default, and notify: true), open-loop load.',
  {
    quick: 'a short run (2 s per rate)',
    rates: '<n,n,…> offered events per second (default 20,1000)',
    seconds: '<s> seconds per run at 1,000 ev/s and above (default 15)',
    'low-seconds': '<s> seconds per run below 1,000 ev/s (default 30)',
    'per-tx': '<n> events per transaction (default 5)',
    notify: '<default,true,…> publisher notify settings to run (default: default,true)',
    storage: '<file|memory> stream storage (default file)',
    'in-process': 'run the relay in this process (createRelay with the same defaults) instead of as ferry relay',
    subscriber: '<core|jetstream> what receives the messages (default core)',
    'relay-args': '<"--flag value …"> extra ferry relay flags (default none)',
  },
);

const QUICK = hasFlag('quick');
const RATES = listArg('rates', [20, 1000]);
const SECONDS = numArg('seconds', QUICK ? 2 : 15);
const LOW_SECONDS = numArg('low-seconds', QUICK ? 2 : 30);
const PER_TX = numArg('per-tx', 5);
const NOTIFY_MODES = arg('notify', 'default,true')
  .split(',')
  .filter((x) => x !== '');
const STORAGE = arg('storage', 'file') === 'memory' ? 'memory' : 'file';
const IN_PROCESS = hasFlag('in-process');
const SUBSCRIBER = arg('subscriber', 'core') === 'jetstream' ? 'jetstream' : 'core';
const RELAY_ARGS = arg('relay-args', '')
  .split(' ')
  .filter((x) => x !== '');
const WARMUP_SECONDS = 1;
const KEYS = 500;
const LANES = 16;

const db = await createTestDatabase({ prefix: 'bench_lat', lanes: LANES, max: 20 });

interface LatencyRun {
  rate: number;
  notify: string;
  offeredPerSec: number;
  committedPerSec: number;
  measured: number;
  lost: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  p999Ms: number;
  maxMs: number;
  /** Share of all cores busy during the open loop, 0-1; absent where /proc cannot be read. */
  machineBusy?: number;
  /** CPU ms of the relay process and of its PostgreSQL backends per 1,000 events committed (undefined in process). */
  relayCpuMsPer1k?: number;
  postgresCpuMsPer1k?: number;
}

async function oneRun(rate: number, notify: string, seconds: number): Promise<LatencyRun> {
  const stream = await createTestStream({ prefix: 'benchlat', storage: STORAGE });
  const subject = `${stream.prefix}.orders`;
  const clock = new LatencyClock();
  const onMessage = (id: string) => clock.arrived(id);
  let stopReading: () => void;
  let reading: Promise<void>;
  if (SUBSCRIBER === 'core') {
    const sub = stream.nc.subscribe(subject);
    stopReading = () => sub.unsubscribe();
    reading = (async () => {
      for await (const m of sub) onMessage(m.headers?.get(WIRE_HEADERS.id) ?? '');
    })();
  } else {
    const consumer = await jetstream(stream.nc).consumers.get(stream.name);
    const messages = await consumer.consume();
    stopReading = () => void messages.stop();
    reading = (async () => {
      for await (const m of messages) onMessage(m.headers?.get(WIRE_HEADERS.id) ?? '');
    })();
  }
  await stream.nc.flush();
  const relayOptions = { databaseUrl: db.url, schema: db.schema, natsUrl: natsUrl(), extraArgs: RELAY_ARGS };
  let stopRelay: () => Promise<void>;
  let meter: Awaited<ReturnType<typeof cpuMeter>> | undefined;
  if (IN_PROCESS) {
    const relay = createRelay({ databaseUrl: db.url, schema: db.schema, nats: { servers: natsUrl() } });
    await relay.start();
    await until(() => relay.ready() && relay.lanes.length === LANES, 'the relay to lease its lanes', 30_000);
    stopRelay = () => relay.stop();
  } else {
    const relays = await startRelayProcesses(1, LANES, relayOptions);
    stopRelay = () => Promise.all(relays.map((r) => r.stop())).then(() => {});
    meter = await cpuMeter(db.pool, relays);
  }
  const publisher = createPublisher({ schema: db.schema, source: 'bench', ...(notify === 'true' ? { notify: true } : {}) });
  let committed = 0;
  let measuring = false;
  let n = 0;
  const commitOne = async () => {
    const i = n;
    n += PER_TX;
    const events = Array.from({ length: PER_TX }, (_, j) => ({
      subject,
      key: `order-${(i + j) % KEYS}`,
      type: 'OrderPlaced',
      data: { order: i + j, amount: 4200, currency: 'EUR', lines: [{ sku: 'A-1', qty: 2 }] },
    }));
    const results = await withTransaction(db.pool, (tx) => publisher.publishMany(tx, events));
    committed += PER_TX;
    clock.committed(
      results.map((r) => r.id),
      measuring,
    );
  };
  try {
    const start = performance.now();
    const busy0 = machineBusySeconds();
    const warm = setTimeout(() => {
      measuring = true;
    }, WARMUP_SECONDS * 1000);
    await openLoop(rate, PER_TX, seconds, commitOne);
    clearTimeout(warm);
    const elapsed = (performance.now() - start) / 1000;
    const busy1 = machineBusySeconds();
    const busy = busy0 && busy1 ? (busy1.busy - busy0.busy) / (elapsed * busy1.cores) : undefined;
    const cpu = await meter?.stop();
    const per1k = (seconds: number) => (seconds * 1e6) / Math.max(1, committed);
    await until(() => clock.received >= committed, 'every message to arrive', 60_000).catch(() => {});
    const sorted = clock.sorted();
    return {
      rate,
      notify,
      offeredPerSec: rate,
      committedPerSec: committed / elapsed,
      measured: sorted.length,
      lost: committed - clock.received,
      p50Ms: percentile(sorted, 50),
      p90Ms: percentile(sorted, 90),
      p99Ms: percentile(sorted, 99),
      p999Ms: percentile(sorted, 99.9),
      maxMs: sorted.at(-1) ?? Number.NaN,
      ...(busy === undefined ? {} : { machineBusy: busy }),
      ...(cpu ? { relayCpuMsPer1k: per1k(cpu.relaySeconds), postgresCpuMsPer1k: per1k(cpu.postgresSeconds) } : {}),
    };
  } finally {
    await stopRelay();
    stopReading();
    await reading;
    await stream.close();
  }
}

try {
  await oneRun(200, 'default', QUICK ? 1 : 2); // warm-up: JIT, first relay start
  const runs: LatencyRun[] = [];
  for (const rate of RATES) {
    for (const notify of NOTIFY_MODES) runs.push(await oneRun(rate, notify, rate >= 1000 ? SECONDS : LOW_SECONDS));
  }
  const how = `${IN_PROCESS ? 'createRelay in process' : relayCommandLine(RELAY_ARGS)}; ${SUBSCRIBER} subscriber; ${STORAGE} storage; ${PER_TX} events per transaction`;
  printTable(
    `Commit → message at a subscriber, open loop (${how}); ms; machine busy: share of all cores during the run; relay and its PostgreSQL backends: CPU ms per 1,000 events`,
    ['events/s', 'publisher notify', 'p50', 'p90', 'p99', 'p99.9', 'max', 'measured', 'lost', 'machine busy', 'relay CPU', 'PG CPU'],
    runs.map((r) => [
      r.rate,
      r.notify === 'true' ? 'true' : 'default',
      r.p50Ms,
      r.p90Ms,
      r.p99Ms,
      r.p999Ms,
      r.maxMs,
      r.measured,
      r.lost,
      r.machineBusy === undefined ? '–' : `${Math.round(r.machineBusy * 100)}%`,
      r.relayCpuMsPer1k ?? '–',
      r.postgresCpuMsPer1k ?? '–',
    ]),
  );
  const byDefault = runs.filter((r) => r.notify === 'default');
  const file = writeResult('relay-latency', {
    scenario: 'relay-latency',
    params: {
      rates: RATES,
      seconds: SECONDS,
      lowSeconds: LOW_SECONDS,
      perTx: PER_TX,
      warmupSeconds: WARMUP_SECONDS,
      keys: KEYS,
      storage: STORAGE,
      inProcess: IN_PROCESS,
      subscriber: SUBSCRIBER,
      relayArgs: RELAY_ARGS,
      quick: QUICK,
    },
    relayCommand: IN_PROCESS ? 'createRelay (in process)' : relayCommandLine(RELAY_ARGS),
    runs,
    headline: {
      /** The worst p99 over the rates with the defaults: the target is <= 10 ms at each. */
      worstP99MsDefaults: Math.max(...byDefault.map((r) => r.p99Ms)),
      byRate: Object.fromEntries(runs.map((r) => [`${r.rate}/${r.notify}`, { p50Ms: r.p50Ms, p99Ms: r.p99Ms, p999Ms: r.p999Ms }])),
    },
  });
  console.log(`wrote ${file}`);
} finally {
  await db.close();
}
process.exit(0);
