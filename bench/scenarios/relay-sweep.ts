/**
 * Scenario 2, relay drain: a backlog of 100,000 events (--quick: 3,000)
 * committed in one transaction while a relay is running, drained to the last
 * batch marked published, against the ceiling: raw pipelined JetStream
 * publishing of the same messages (same headers, same sizes) from one Node
 * connection with the same window of unacknowledged messages. Headline trials
 * at the relay defaults, raw and relay interleaved (order alternating); then a
 * sweep of batch size x max in flight on a smaller backlog (20,000), each
 * window's raw ceiling measured beside it, and the defaults recommended from
 * the data. Variants at the defaults: 100 and 10,000 keys (the relay keeps
 * each key's rows in order), and nats.js `noAsyncTraces` for relay and raw alike.
 *
 *   node bench/dist/scenarios/relay-sweep.js [--quick] [--events N] [--sweep-events N] [--trials N]
 *     [--batches 100,500,2000] [--windows 1000,5000,20000]
 */
import { quoteIdentifier } from '@ferry/core';
import { RELAY_DEFAULTS } from '@ferry/relay';
import { createTestDatabase, createTestStream, natsUrl } from '@ferry/testkit';
import { connect } from '@nats-io/transport-node';
import { listArg, numArg } from '../lib/args.js';
import { makeRows, rawPublish, relayDrain } from '../lib/outbox.js';
import { fmt, hasFlag, printTable, summarize, writeResult } from '../lib/stats.js';

const QUICK = hasFlag('quick');
const EVENTS = numArg('events', QUICK ? 3000 : 100_000);
const SWEEP_EVENTS = numArg('sweep-events', QUICK ? 2000 : 20_000);
const TRIALS = numArg('trials', QUICK ? 1 : 3);
const BATCHES = listArg('batches', QUICK ? [500] : [100, 500, 2000]);
const WINDOWS = listArg('windows', QUICK ? [1000, 5000] : [1000, 5000, 20_000]);
const KEYS = 1000;
const VARIANT_KEYS = listArg('variant-keys', QUICK ? [100] : [100, 10_000]);
const LANES = 16;
const DEFAULT_BATCH = RELAY_DEFAULTS.batchSize;
const DEFAULT_WINDOW = RELAY_DEFAULTS.maxInFlight;

const db = await createTestDatabase({ prefix: 'bench_sweep', lanes: LANES, max: 4 });
let run = 0;

interface Variant {
  keys?: number;
  /** nats.js `noAsyncTraces`: no Error (with a stack) built per request. */
  noAsyncTraces?: boolean;
}

async function relayOnce(batchSize: number, maxInFlight: number, count: number, v: Variant = {}): Promise<number> {
  const stream = await createTestStream({ prefix: 'benchsweep' });
  try {
    await db.pool.query(`TRUNCATE ${quoteIdentifier(db.schema)}.outbox`);
    const eps = await relayDrain(
      db.pool,
      db.schema,
      {
        databaseUrl: db.url,
        schema: db.schema,
        nats: { servers: natsUrl(), ...(v.noAsyncTraces ? { noAsyncTraces: true } : {}) },
        batchSize,
        maxInFlight,
      },
      { count, keys: v.keys ?? KEYS, keyPrefix: `r${run++}-`, subject: `${stream.prefix}.orders` },
    );
    const stored = (await stream.jsm.streams.info(stream.name)).state.messages;
    if (stored !== count) throw new Error(`relay: stream holds ${stored} messages, expected ${count}`);
    return eps;
  } finally {
    await stream.close();
  }
}

async function rawOnce(window: number, count: number, v: Variant = {}): Promise<number> {
  const stream = await createTestStream({ prefix: 'benchraw' });
  const nc = v.noAsyncTraces ? await connect({ servers: natsUrl(), noAsyncTraces: true }) : stream.nc;
  try {
    const rows = makeRows({ count, keys: KEYS, keyPrefix: `w${run++}-`, subject: `${stream.prefix}.orders` });
    const eps = await rawPublish(nc, rows, window);
    const stored = (await stream.jsm.streams.info(stream.name)).state.messages;
    if (stored !== count) throw new Error(`raw: stream holds ${stored} messages, expected ${count}`);
    return eps;
  } finally {
    if (nc !== stream.nc) await nc.close();
    await stream.close();
  }
}

try {
  // Warm-up (JIT, connections), not counted.
  await rawOnce(DEFAULT_WINDOW, Math.min(2000, EVENTS));
  await relayOnce(DEFAULT_BATCH, DEFAULT_WINDOW, Math.min(2000, EVENTS));

  const rawTrials: number[] = [];
  const relayTrials: number[] = [];
  const ratioTrials: number[] = [];
  for (let t = 0; t < TRIALS; t++) {
    let raw = 0;
    let relay = 0;
    if (t % 2 === 0) {
      raw = await rawOnce(DEFAULT_WINDOW, EVENTS);
      relay = await relayOnce(DEFAULT_BATCH, DEFAULT_WINDOW, EVENTS);
    } else {
      relay = await relayOnce(DEFAULT_BATCH, DEFAULT_WINDOW, EVENTS);
      raw = await rawOnce(DEFAULT_WINDOW, EVENTS);
    }
    rawTrials.push(raw);
    relayTrials.push(relay);
    ratioTrials.push(relay / raw);
  }
  const headline = { raw: summarize(rawTrials), relay: summarize(relayTrials), ratio: summarize(ratioTrials) };

  const sweep: Array<{ batchSize: number; maxInFlight: number; relayPerSec: number; rawPerSec: number; ratio: number }> = [];
  const rawByWindow: Record<number, number> = {};
  for (const window of WINDOWS) {
    const raw = await rawOnce(window, SWEEP_EVENTS);
    rawByWindow[window] = raw;
    for (const batch of BATCHES) {
      if (batch > window) continue;
      const relay = await relayOnce(batch, window, SWEEP_EVENTS);
      sweep.push({ batchSize: batch, maxInFlight: window, relayPerSec: relay, rawPerSec: raw, ratio: relay / raw });
    }
  }
  // What else moves the figure, at the defaults: the number of keys (the relay keeps each key's rows in order),
  // and nats.js async traces (an Error with a stack captured per request, on by default).
  const variants: Array<{ name: string; relayPerSec: number; rawPerSec?: number }> = [];
  for (const keys of VARIANT_KEYS) {
    variants.push({
      name: `${keys.toLocaleString('en')} keys`,
      relayPerSec: await relayOnce(DEFAULT_BATCH, DEFAULT_WINDOW, SWEEP_EVENTS, { keys }),
    });
  }
  variants.push({
    name: `${KEYS.toLocaleString('en')} keys, NATS noAsyncTraces`,
    relayPerSec: await relayOnce(DEFAULT_BATCH, DEFAULT_WINDOW, SWEEP_EVENTS, { noAsyncTraces: true }),
    rawPerSec: await rawOnce(DEFAULT_WINDOW, SWEEP_EVENTS, { noAsyncTraces: true }),
  });

  // Recommend: among configurations within 5% of the fastest, the smallest window (memory, fairness), then the smallest batch.
  const best = Math.max(...sweep.map((s) => s.relayPerSec));
  const near = sweep.filter((s) => s.relayPerSec >= best * 0.95).sort((a, b) => a.maxInFlight - b.maxInFlight || a.batchSize - b.batchSize);
  const recommended = near[0];
  const atDefault = sweep.find((s) => s.batchSize === DEFAULT_BATCH && s.maxInFlight === DEFAULT_WINDOW);

  printTable(
    `Relay drain of a ${EVENTS.toLocaleString('en')}-event backlog (${KEYS} keys, ${LANES} lanes, defaults batch ${DEFAULT_BATCH} x in-flight ${DEFAULT_WINDOW}); median of ${TRIALS} interleaved trials`,
    ['path', 'events/s', 'spread', 'min', 'max'],
    [
      [
        'raw pipelined JetStream (one connection)',
        headline.raw.median,
        `±${(headline.raw.spread * 100).toFixed(0)}%`,
        headline.raw.min,
        headline.raw.max,
      ],
      [
        'ferry relay (claim, publish, PubAcks, mark)',
        headline.relay.median,
        `±${(headline.relay.spread * 100).toFixed(0)}%`,
        headline.relay.min,
        headline.relay.max,
      ],
      [
        'ratio relay / raw (target >= 0.8)',
        headline.ratio.median,
        `±${(headline.ratio.spread * 100).toFixed(0)}%`,
        headline.ratio.min,
        headline.ratio.max,
      ],
    ],
  );
  printTable(
    `Sweep on a ${SWEEP_EVENTS.toLocaleString('en')}-event backlog (1 trial per point; raw at the same window beside it)`,
    ['batch', 'in flight', 'relay ev/s', 'raw ev/s', 'ratio'],
    sweep.map((s) => [s.batchSize, s.maxInFlight, s.relayPerSec, s.rawPerSec, s.ratio.toFixed(2)]),
  );
  printTable(
    `Variants at the defaults (${SWEEP_EVENTS.toLocaleString('en')}-event backlog, 1 trial each; raw without the option: ${fmt(rawByWindow[DEFAULT_WINDOW] ?? Number.NaN)} ev/s)`,
    ['variant', 'relay ev/s', 'raw ev/s (same option)'],
    variants.map((v) => [v.name, v.relayPerSec, v.rawPerSec ?? '']),
  );
  console.log(
    `recommended: --batch-size ${recommended?.batchSize} --max-in-flight ${recommended?.maxInFlight} (${recommended?.relayPerSec.toFixed(0)} ev/s; defaults ${DEFAULT_BATCH}/${DEFAULT_WINDOW}: ${atDefault?.relayPerSec.toFixed(0) ?? 'not swept'} ev/s)`,
  );
  const file = writeResult('relay-sweep', {
    scenario: 'relay-sweep',
    params: { events: EVENTS, sweepEvents: SWEEP_EVENTS, trials: TRIALS, keys: KEYS, lanes: LANES, quick: QUICK },
    defaults: { batchSize: DEFAULT_BATCH, maxInFlight: DEFAULT_WINDOW },
    headline,
    sweep,
    rawByWindow,
    variants,
    recommended,
    atDefault,
  });
  console.log(`wrote ${file}`);
} finally {
  await db.close();
}
process.exit(0);
