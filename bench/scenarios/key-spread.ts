/**
 * Scenario 9, key spread: the relay (defaults) draining a backlog of 20,000
 * events (--quick: 2,000) spread over 1 hot key, 10 keys and 1,000 keys, on
 * a file-storage stream (what users run), against raw pipelined JetStream
 * publishing of the same messages from one connection in the same run: the
 * ceiling is the better of a window of 100 and one of `maxInFlight` PubAcks
 * outstanding. The relay sends a key's next row only after the previous
 * row's PubAck (per-key order under every failure), so a single hot key runs
 * at one round trip per event; this measures what that costs.
 *
 *   node bench/dist/scenarios/key-spread.js [--quick] [--events N] [--keys 1,10,1000] [--trials N] [--storage file|memory]
 */
import { quoteIdentifier } from '@ferry/core';
import { RELAY_DEFAULTS } from '@ferry/relay';
import { createTestDatabase, createTestStream, natsUrl } from '@ferry/testkit';
import { connect } from '@nats-io/transport-node';
import { arg, listArg, numArg } from '../lib/args.js';
import { makeRows, rawPublish, relayDrain } from '../lib/outbox.js';
import { hasFlag, printTable, summarize, writeResult } from '../lib/stats.js';

if (hasFlag('help')) {
  console.log(
    'usage: node bench/dist/scenarios/key-spread.js [--quick] [--events N] [--keys 1,10,1000] [--trials N] [--storage file|memory]',
  );
  process.exit(0);
}

const QUICK = hasFlag('quick');
const EVENTS = numArg('events', QUICK ? 2000 : 20_000);
const KEYS = listArg('keys', [1, 10, 1000]);
const TRIALS = numArg('trials', QUICK ? 1 : 2);
const STORAGE = arg('storage', 'file') === 'memory' ? 'memory' : 'file';

const db = await createTestDatabase({ prefix: 'bench_spread', lanes: 16, max: 4 });
const nc = await connect({ servers: natsUrl(), name: 'ferry-bench-raw', noAsyncTraces: true });
let run = 0;

async function relayOnce(keys: number): Promise<number> {
  const stream = await createTestStream({ prefix: 'benchspread', storage: STORAGE });
  try {
    await db.pool.query(`TRUNCATE ${quoteIdentifier(db.schema)}.outbox`);
    return await relayDrain(
      db.pool,
      db.schema,
      { databaseUrl: db.url, schema: db.schema, nats: { servers: natsUrl() } },
      { count: EVENTS, keys, keyPrefix: `r${run++}-`, subject: `${stream.prefix}.orders` },
    );
  } finally {
    await stream.close();
  }
}

async function rawOnce(keys: number): Promise<number> {
  let best = 0;
  for (const window of [100, RELAY_DEFAULTS.maxInFlight]) {
    const stream = await createTestStream({ prefix: 'benchspreadraw', storage: STORAGE });
    try {
      const rows = makeRows({ count: EVENTS, keys, keyPrefix: `w${run++}-`, subject: `${stream.prefix}.orders` });
      best = Math.max(best, await rawPublish(nc, rows, window));
    } finally {
      await stream.close();
    }
  }
  return best;
}

const results: Record<string, { relay: ReturnType<typeof summarize>; raw: ReturnType<typeof summarize>; ratio: number }> = {};
for (const keys of KEYS) {
  const relay: number[] = [];
  const raw: number[] = [];
  for (let t = 0; t < TRIALS; t++) {
    // Interleaved, order alternating, so drift on a shared machine hits both alike.
    if (t % 2 === 0) {
      raw.push(await rawOnce(keys));
      relay.push(await relayOnce(keys));
    } else {
      relay.push(await relayOnce(keys));
      raw.push(await rawOnce(keys));
    }
  }
  results[keys] = { relay: summarize(relay), raw: summarize(raw), ratio: summarize(relay).median / summarize(raw).median };
}
await nc.close();
await db.close();

printTable(
  `Relay drain by key spread, ${EVENTS} events, ${STORAGE} storage (medians of ${TRIALS})`,
  ['keys', 'relay ev/s', 'raw ev/s', 'relay / raw'],
  KEYS.map((k) => [String(k), results[k]?.relay.median ?? 0, results[k]?.raw.median ?? 0, results[k]?.ratio ?? 0]),
);
console.log(`wrote ${writeResult('key-spread', { events: EVENTS, storage: STORAGE, byKeys: results })}`);
