/**
 * Scenario 2, the drain table: `ferry relay` as a separate process with its
 * defaults (no tuning flag; lanes, batch, in-flight, LISTEN all as shipped)
 * draining a backlog of 20,000 events of about 200 bytes (--quick: 2,000),
 * committed in one transaction while it runs, for 10, 1,000 and 100,000 keys,
 * on a file-storage stream (what docker-compose.yml and users run) and on a
 * memory-storage one. Beside it, in the same run:
 * - the ceiling: raw pipelined JetStream publishing of the same messages (the
 *   same seven ce-* headers and Nats-Msg-Id, same bytes) from one connection
 *   of this process, the better of 100 and `maxInFlight` PubAcks outstanding,
 *   with `js.publish()` on a connection that sets `noAsyncTraces` (nats.js's
 *   fastest setting for it: with the defaults, raw drains about a quarter
 *   slower and the relay would look better than it is);
 * - two relay processes sharing the lanes (is one Node connection the ceiling?);
 * - CPU seconds per 1,000 events of the relay process(es) and of the
 *   PostgreSQL backends serving them (utime + stime from /proc), and of the
 *   raw publisher (process.cpuUsage).
 * A drain is timed from COMMIT returning to the last row marked published
 * (every message is in the stream by then; the count is checked). Each relay
 * process first drains a backlog of the same size, not counted, so that its
 * JIT is as warm as the benchmark process's (a relay runs for days). Trials are
 * interleaved, order rotating across raw / one relay / two relays; figures are
 * medians, a ratio is the median of the per-trial ratios. Then one hot key
 * (every event on the same key: one PubAck round trip per event, by design)
 * against raw on file storage.
 */
import { quoteIdentifier } from '@ferry/core';
import { RELAY_DEFAULTS } from '@ferry/relay';
import { createTestDatabase, createTestStream, natsUrl, type TestStream } from '@ferry/testkit';
import { connect } from '@nats-io/transport-node';
import { arg, declareFlags, hasFlag, listArg, numArg, sleep } from '../lib/args.js';
import { commitBacklog, makeRows, rawPublish } from '../lib/outbox.js';
import { cpuMeter, relayCommandLine, startRelayProcesses } from '../lib/relay-process.js';
import { fmt, printTable, type Summary, summarize, writeResult } from '../lib/stats.js';

declareFlags(
  'node bench/dist/scenarios/relay-drain.js',
  'The drain table: ferry relay (a process, defaults) against raw pipelined JetStream, by key spread and storage, one and two instances, with CPU per 1,000 events.',
  {
    quick: 'a small run (2,000 events, 1,000 keys, 1 trial, hot key 500 events)',
    events: '<n> events in each backlog (default 20,000)',
    keys: '<n,n,…> key spreads (default 10,1000,100000)',
    storage: '<file,memory> stream storages, the first is the headline (default file,memory)',
    trials: '<n> interleaved trials per cell (default 3)',
    'hot-events': '<n> events on one key for the hot-key figure, 0 to skip (default 20,000)',
  },
);

const QUICK = hasFlag('quick');
const EVENTS = numArg('events', QUICK ? 2000 : 20_000);
const KEYS = listArg('keys', QUICK ? [1000] : [10, 1000, 100_000]);
const STORAGES = arg('storage', 'file,memory')
  .split(',')
  .map((s) => (s === 'memory' ? 'memory' : 'file'));
const TRIALS = numArg('trials', QUICK ? 1 : 3);
const HOT_EVENTS = numArg('hot-events', QUICK ? 500 : 20_000);
const LANES = 16; // what `ferry migrate` creates by default
/**
 * Events each relay process drains before the measured backlog (its JIT warm-up). A relay runs
 * for days, and the raw client in this process is warm from every trial before; after 2,000
 * events the relay still spent 46-49 ms of CPU per 1,000 events, after 20,000 33-35 ms
 * (1,000 keys, file storage, two runs each).
 */
const WARM_EVENTS = QUICK ? 500 : 20_000;
const MODES = ['raw', 'one', 'two'] as const;
type Mode = (typeof MODES)[number];
type Storage = 'file' | 'memory';

const db = await createTestDatabase({ prefix: 'bench_drain', lanes: LANES, max: 4 });
const s = quoteIdentifier(db.schema);
const rawNc = await connect({ servers: natsUrl(), name: 'ferry-bench-raw', noAsyncTraces: true });
let run = 0;

interface Sample {
  eventsPerSec: number;
  /** CPU seconds per 1,000 events: the relay process(es) or, for raw, this process. */
  clientCpuPer1k: number;
  /** CPU seconds per 1,000 events of the PostgreSQL backends serving the relay(s); 0 for raw. */
  postgresCpuPer1k: number;
}

async function streamCount(stream: TestStream): Promise<number> {
  return (await stream.jsm.streams.info(stream.name)).state.messages;
}

async function rawOnce(storage: Storage, keys: number, count: number): Promise<Sample> {
  let best: Sample | undefined;
  for (const window of [100, RELAY_DEFAULTS.maxInFlight]) {
    const stream = await createTestStream({ prefix: 'benchdrainraw', storage });
    try {
      const rows = makeRows({ count, keys, keyPrefix: `w${run++}-`, subject: `${stream.prefix}.orders` });
      const before = process.cpuUsage();
      const eventsPerSec = await rawPublish(rawNc, rows, window);
      const used = process.cpuUsage(before);
      const stored = await streamCount(stream);
      if (stored !== count) throw new Error(`raw: the stream holds ${stored} messages, expected ${count}`);
      if (!best || eventsPerSec > best.eventsPerSec) {
        best = { eventsPerSec, clientCpuPer1k: ((used.user + used.system) / 1e6 / count) * 1000, postgresCpuPer1k: 0 };
      }
    } finally {
      await stream.close();
    }
  }
  return best as Sample;
}

async function relayOnce(instances: number, storage: Storage, keys: number, count: number): Promise<Sample> {
  await db.pool.query(`TRUNCATE ${s}.outbox, ${s}.key_versions`);
  const stream = await createTestStream({ prefix: 'benchdrain', storage });
  const relays = await startRelayProcesses(instances, LANES, { databaseUrl: db.url, schema: db.schema, natsUrl: natsUrl() });
  const drain = async (n: number) => {
    const before = await streamCount(stream);
    const t0 = await commitBacklog(db.pool, db.schema, { count: n, keys, keyPrefix: `r${run++}-`, subject: `${stream.prefix}.orders` });
    // Cheap first (NATS), then the database: this process's queries compete for the same cores.
    while ((await streamCount(stream)) < before + n) await sleep(10);
    for (;;) {
      const { rows } = await db.pool.query(`SELECT EXISTS (SELECT 1 FROM ${s}.outbox_pending) AS pending`);
      if (!rows[0]?.pending) break;
      await sleep(5);
    }
    const seconds = (performance.now() - t0) / 1000;
    const stored = (await streamCount(stream)) - before;
    if (stored !== n) throw new Error(`relay: the stream received ${stored} messages, expected ${n}`);
    return seconds;
  };
  try {
    // A relay runs for days: warm its JIT on a small backlog first (not counted), as the raw client's process is warm.
    await drain(WARM_EVENTS);
    await sleep(200); // let the relays settle into their idle poll
    const meter = await cpuMeter(db.pool, relays);
    const seconds = await drain(count);
    const cpu = await meter.stop();
    return {
      eventsPerSec: count / seconds,
      clientCpuPer1k: (cpu.relaySeconds * 1000) / count,
      postgresCpuPer1k: (cpu.postgresSeconds * 1000) / count,
    };
  } finally {
    await Promise.all(relays.map((r) => r.stop()));
    await stream.close();
  }
}

function once(mode: Mode, storage: Storage, keys: number, count: number): Promise<Sample> {
  return mode === 'raw' ? rawOnce(storage, keys, count) : relayOnce(mode === 'one' ? 1 : 2, storage, keys, count);
}

interface Cell {
  keys: number;
  storage: Storage;
  eventsPerSec: Record<Mode, Summary>;
  /** Median of the per-trial ratios relay / raw. */
  ratio: Summary;
  twoInstancesRatio: Summary;
  /** Two instances / one instance. */
  twoVsOne: Summary;
  /** Per trial: the relay process's CPU per event / the raw publisher's, paired. */
  cpuVsRaw: Summary;
  cpuPer1k: { relay: Summary; postgres: Summary; relayTwo: Summary; postgresTwo: Summary; raw: Summary };
}

function cell(storage: Storage, keys: number, samples: Array<Record<Mode, Sample>>): Cell {
  const col = (m: Mode, f: keyof Sample) => summarize(samples.map((x) => x[m][f]));
  return {
    keys,
    storage,
    eventsPerSec: { raw: col('raw', 'eventsPerSec'), one: col('one', 'eventsPerSec'), two: col('two', 'eventsPerSec') },
    ratio: summarize(samples.map((x) => x.one.eventsPerSec / x.raw.eventsPerSec)),
    twoInstancesRatio: summarize(samples.map((x) => x.two.eventsPerSec / x.raw.eventsPerSec)),
    twoVsOne: summarize(samples.map((x) => x.two.eventsPerSec / x.one.eventsPerSec)),
    cpuVsRaw: summarize(samples.map((x) => x.one.clientCpuPer1k / x.raw.clientCpuPer1k)),
    cpuPer1k: {
      relay: col('one', 'clientCpuPer1k'),
      postgres: col('one', 'postgresCpuPer1k'),
      relayTwo: col('two', 'clientCpuPer1k'),
      postgresTwo: col('two', 'postgresCpuPer1k'),
      raw: col('raw', 'clientCpuPer1k'),
    },
  };
}

try {
  // Warm-up (JIT of this process, the first stream and relay start), not counted.
  await once('raw', 'file', 100, Math.min(2000, EVENTS));
  await once('one', 'file', 100, Math.min(2000, EVENTS));

  const samples = new Map<string, Array<Record<Mode, Sample>>>();
  let turn = 0;
  for (let t = 0; t < TRIALS; t++) {
    for (const storage of STORAGES) {
      for (const keys of KEYS) {
        const order = MODES.map((_, i) => MODES[(i + turn) % MODES.length] as Mode);
        turn++;
        const got: Partial<Record<Mode, Sample>> = {};
        for (const m of order) got[m] = await once(m, storage, keys, EVENTS);
        const id = `${storage}/${keys}`;
        samples.set(id, [...(samples.get(id) ?? []), got as Record<Mode, Sample>]);
      }
    }
  }
  const cells: Cell[] = [];
  for (const storage of STORAGES) for (const keys of KEYS) cells.push(cell(storage, keys, samples.get(`${storage}/${keys}`) ?? []));

  let hotKey: { events: number; raw: Summary; relay: Summary; ratio: Summary; cpuPer1k: Summary } | undefined;
  if (HOT_EVENTS > 0) {
    const hot: Array<{ raw: Sample; one: Sample }> = [];
    for (let t = 0; t < TRIALS; t++) {
      if (t % 2 === 0) {
        const raw = await rawOnce('file', 1, HOT_EVENTS);
        hot.push({ raw, one: await relayOnce(1, 'file', 1, HOT_EVENTS) });
      } else {
        const one = await relayOnce(1, 'file', 1, HOT_EVENTS);
        hot.push({ one, raw: await rawOnce('file', 1, HOT_EVENTS) });
      }
    }
    hotKey = {
      events: HOT_EVENTS,
      raw: summarize(hot.map((x) => x.raw.eventsPerSec)),
      relay: summarize(hot.map((x) => x.one.eventsPerSec)),
      ratio: summarize(hot.map((x) => x.one.eventsPerSec / x.raw.eventsPerSec)),
      cpuPer1k: summarize(hot.map((x) => x.one.clientCpuPer1k)),
    };
  }

  const pct = (x: Summary) => `±${(x.spread * 100).toFixed(0)}%`;
  printTable(
    `Relay drain of a ${EVENTS.toLocaleString('en')}-event backlog: \`${relayCommandLine()}\` (defaults) vs raw pipelined JetStream, one connection; median of ${TRIALS} interleaved trial(s); CPU in ms per 1,000 events`,
    [
      'storage',
      'keys',
      'raw ev/s',
      'relay ev/s',
      'relay/raw',
      'spread',
      'relay CPU',
      'PG CPU',
      'raw CPU',
      '2 relays ev/s',
      '2 relays/raw',
      '2 relays CPU',
      '2 relays PG',
    ],
    cells.map((c) => [
      c.storage,
      c.keys.toLocaleString('en'),
      c.eventsPerSec.raw.median,
      c.eventsPerSec.one.median,
      c.ratio.median.toFixed(2),
      pct(c.ratio),
      fmt(c.cpuPer1k.relay.median * 1000),
      fmt(c.cpuPer1k.postgres.median * 1000),
      fmt(c.cpuPer1k.raw.median * 1000),
      c.eventsPerSec.two.median,
      c.twoInstancesRatio.median.toFixed(2),
      fmt(c.cpuPer1k.relayTwo.median * 1000),
      fmt(c.cpuPer1k.postgresTwo.median * 1000),
    ]),
  );
  if (hotKey) {
    console.log(
      `hot key (1 key, ${HOT_EVENTS.toLocaleString('en')} events, file storage): relay ${fmt(hotKey.relay.median)} ev/s, raw ${fmt(hotKey.raw.median)} ev/s, ratio ${hotKey.ratio.median.toFixed(3)}`,
    );
  }
  const headlineStorage = STORAGES[0] ?? 'file';
  const inStorage = (st: Storage) => cells.filter((c) => c.storage === st);
  const worst = (st: Storage) => Math.min(...inStorage(st).map((c) => c.ratio.median));
  const mid = cells.find((c) => c.storage === headlineStorage && c.keys === 1000) ?? inStorage(headlineStorage)[0];
  const file = writeResult('relay-drain', {
    scenario: 'relay-drain',
    params: { events: EVENTS, keys: KEYS, storages: STORAGES, trials: TRIALS, lanes: LANES, hotEvents: HOT_EVENTS, quick: QUICK },
    relayCommand: relayCommandLine(),
    cells,
    hotKey,
    headline: {
      storage: headlineStorage,
      /** The lowest relay / raw over the key spreads, headline storage (reported: per-key chains bound it, issue 46). */
      worstRatio: worst(headlineStorage),
      worstMemoryRatio: STORAGES.includes('memory') ? worst('memory') : undefined,
      byKeys: Object.fromEntries(inStorage(headlineStorage).map((c) => [c.keys, c.ratio.median])),
      relayEventsPerSec: mid?.eventsPerSec.one.median,
      rawEventsPerSec: mid?.eventsPerSec.raw.median,
      atKeys: mid?.keys,
      relayCpuMsPer1k: (mid?.cpuPer1k.relay.median ?? Number.NaN) * 1000,
      postgresCpuMsPer1k: (mid?.cpuPer1k.postgres.median ?? Number.NaN) * 1000,
      rawCpuMsPer1k: (mid?.cpuPer1k.raw.median ?? Number.NaN) * 1000,
      /** The relay's CPU / the raw publisher's, median of the paired trials (budget <= 1.15). */
      relayCpuVsRaw: mid?.cpuVsRaw.median,
      twoInstancesVsOne: mid?.twoVsOne.median,
      hotKeyRatio: hotKey?.ratio.median,
      hotKeyEventsPerSec: hotKey?.relay.median,
    },
  });
  console.log(`wrote ${file}`);
} finally {
  await rawNc.close();
  await db.close();
}
process.exit(0);
