/**
 * Scenario 6, growth: relay drain throughput and publish latency with 0, 1
 * million and 5 million retained published rows in the outbox (--quick:
 * 0, 10,000, 30,000), each level against level 0 measured in the same run.
 * The retained rows are generated with INSERT … SELECT generate_series,
 * published 8 days ago, then VACUUM ANALYZE (what autovacuum would do). At
 * the top level the relay's own prune (7-day retention, batches of 5,000)
 * deletes them; table and index sizes before and after (after VACUUM): the
 * outbox with its delivery-state tables, outbox_pending and outbox_published
 * (outbox migration 000015), summed.
 *
 *   node bench/dist/scenarios/growth.js [--quick] [--levels 0,1000000,5000000] [--backlog 20000] [--publishes 1000]
 */
import { randomInt } from 'node:crypto';
import { quoteIdentifier } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createRelay } from '@ferry/relay';
import { createTestDatabase, natsUrl } from '@ferry/testkit';
import { declareFlags, hasFlag, listArg, numArg } from '../lib/args.js';
import { generateRows, outboxTables, publishPendingSql, relayDrainFreshStream } from '../lib/outbox.js';
import { percentile, printTable, summarize, writeResult } from '../lib/stats.js';

declareFlags(
  'node bench/dist/scenarios/growth.js',
  'Relay drain and publish latency with retained published rows, each level against level 0.',
  {
    quick: 'a small run (levels 0, 10,000, 30,000)',
    levels: '<n,n,…> retained published rows per level (default 0,1000000,5000000)',
    backlog: '<n> events drained per level (default 20,000)',
    publishes: '<n> publishes timed per level (default 1,000)',
    trials: '<n> trials (default 2)',
  },
);

const QUICK = hasFlag('quick');
const LEVELS = listArg('levels', QUICK ? [0, 10_000, 30_000] : [0, 1_000_000, 5_000_000]);
const BACKLOG = numArg('backlog', QUICK ? 1000 : 20_000);
const PUBLISHES = numArg('publishes', QUICK ? 100 : 1000);
const TRIALS = numArg('trials', QUICK ? 1 : 2);
const DAY_MS = 86_400_000;
const ACCOUNTS = 10_000;

const db = await createTestDatabase({ prefix: 'bench_growth', lanes: 16, max: 4 });
const s = quoteIdentifier(db.schema);
const publisher = createPublisher({ schema: db.schema, source: 'bench' });
let run = 0;

/** The outbox's rows, and the table and index sizes of the outbox, outbox_pending and outbox_published together. */
async function sizes() {
  const { rows } = await db.pool.query<{ table: string; indexes: string; rows: string }>(
    `SELECT sum(pg_relation_size(t))::text AS table, sum(pg_indexes_size(t))::text AS indexes,
            (SELECT count(*) FROM ${s}.outbox)::text AS rows
       FROM unnest($1::regclass[]) AS t`,
    [[`${s}.outbox`, `${s}.outbox_pending`, `${s}.outbox_published`]],
  );
  const r = rows[0];
  return { rows: Number(r?.rows), tableMiB: Number(r?.table) / 2 ** 20, indexesMiB: Number(r?.indexes) / 2 ** 20 };
}

async function drain(): Promise<number> {
  return relayDrainFreshStream(db, 'benchgrowth', { count: BACKLOG, keys: 1000, keyPrefix: `b${run++}-` });
}

/** PUBLISHES sequential business transactions (UPDATE + publish), one writer: latency of each, ms. */
async function publishLatency(): Promise<{ p50Ms: number; p99Ms: number }> {
  const c = await db.pool.connect();
  const ms: number[] = [];
  const prefix = `p${run++}-`;
  try {
    for (let i = 0; i < PUBLISHES; i++) {
      const t = performance.now();
      await c.query('BEGIN');
      await c.query(`UPDATE ${s}.accounts SET balance = balance + 1 WHERE id = $1`, [randomInt(1, ACCOUNTS + 1)]);
      await publisher.publish(c, {
        subject: 'bench.growth',
        key: `${prefix}${i % 500}`,
        type: 'OrderPlaced',
        data: { order: i, amount: 4200 },
      });
      await c.query('COMMIT');
      ms.push(performance.now() - t);
    }
  } finally {
    c.release();
  }
  // Not relayed (no stream covers bench.growth): mark them published like the rest of the history.
  await db.pool.query(publishPendingSql(s));
  ms.sort((a, b) => a - b);
  return { p50Ms: percentile(ms, 50), p99Ms: percentile(ms, 99) };
}

try {
  await db.pool.query(`CREATE TABLE ${s}.accounts (id int PRIMARY KEY, balance bigint NOT NULL DEFAULT 0)`);
  await db.pool.query(`INSERT INTO ${s}.accounts (id) SELECT generate_series(1, ${ACCOUNTS})`);
  await drain(); // warm-up
  const levels = [];
  let retained = 0;
  for (const level of LEVELS) {
    const started = performance.now();
    if (level > retained) {
      await generateRows(
        db.pool,
        db.schema,
        { count: level - retained, keys: 100_000, keyPrefix: 'old-', subject: 'bench.old', publishedAgoMs: 8 * DAY_MS },
        retained,
      );
      retained = level;
    }
    await db.pool.query(`VACUUM ANALYZE ${outboxTables(s)}`);
    const generateSeconds = (performance.now() - started) / 1000;
    const drains: number[] = [];
    const p50s: number[] = [];
    const p99s: number[] = [];
    for (let t = 0; t < TRIALS; t++) {
      drains.push(await drain());
      const l = await publishLatency();
      p50s.push(l.p50Ms);
      p99s.push(l.p99Ms);
    }
    levels.push({
      retained: level,
      generateSeconds,
      size: await sizes(),
      drainPerSec: summarize(drains),
      publishP50Ms: summarize(p50s),
      publishP99Ms: summarize(p99s),
    });
  }
  const before = await sizes();
  const relay = createRelay({ databaseUrl: db.url, schema: db.schema, nats: { servers: natsUrl() }, maintenance: true, listen: false });
  await relay.start();
  const pruneStarted = performance.now();
  let pruned = 0;
  for (;;) {
    const n = await relay.prune();
    pruned += n;
    if (n === 0) break;
  }
  const pruneSeconds = (performance.now() - pruneStarted) / 1000;
  await relay.stop();
  await db.pool.query(`VACUUM ANALYZE ${outboxTables(s)}`);
  const after = await sizes();
  const afterDrain = summarize([await drain()]);

  const base = levels[0];
  const rows = levels.map((l) => [
    l.retained.toLocaleString('en'),
    l.drainPerSec.median,
    base ? (l.drainPerSec.median / base.drainPerSec.median).toFixed(2) : '',
    l.publishP50Ms.median,
    base ? (l.publishP50Ms.median / base.publishP50Ms.median).toFixed(2) : '',
    l.publishP99Ms.median,
    l.size.tableMiB,
    l.size.indexesMiB,
  ]);
  printTable(
    `Growth: relay drain of ${BACKLOG.toLocaleString('en')} events and ${PUBLISHES} single-writer publishes per level, median of ${TRIALS}`,
    ['retained rows', 'drain ev/s', 'vs 0', 'publish p50 ms', 'vs 0', 'publish p99 ms', 'table MiB', 'indexes MiB'],
    rows,
  );
  console.log(
    `prune: ${pruned.toLocaleString('en')} rows in ${pruneSeconds.toFixed(1)} s; table ${before.tableMiB.toFixed(0)} -> ${after.tableMiB.toFixed(0)} MiB, indexes ${before.indexesMiB.toFixed(0)} -> ${after.indexesMiB.toFixed(0)} MiB (after VACUUM); drain after prune ${afterDrain.median.toFixed(0)} ev/s`,
  );
  const top = levels.at(-1);
  const file = writeResult('growth', {
    scenario: 'growth',
    params: { levels: LEVELS, backlog: BACKLOG, publishes: PUBLISHES, trials: TRIALS, quick: QUICK },
    levels,
    prune: { rows: pruned, seconds: pruneSeconds, before, after, drainAfterPerSec: afterDrain.median },
    drainTopVsZero: top && base ? top.drainPerSec.median / base.drainPerSec.median : Number.NaN,
    publishP50TopVsZero: top && base ? top.publishP50Ms.median / base.publishP50Ms.median : Number.NaN,
  });
  console.log(`wrote ${file}`);
} finally {
  await db.pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(`${db.schema}_boss`)} CASCADE`).catch(() => {});
  await db.close();
}
process.exit(0);
