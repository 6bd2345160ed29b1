/**
 * Publisher overhead: transactions per second of (business UPDATE + publish)
 * against (business UPDATE + INSERT of the same JSON into a plain table),
 * same run, interleaved trials, N concurrent writers. Also publishMany of 100
 * events against one 100-row plain INSERT. Beside each rate, the CPU per
 * transaction of this process and of the writers' PostgreSQL backends (/proc),
 * and its ratio to the baseline's (issue 30's budgets are CPU ratios: publish
 * <= 1.25x, publishMany(100) <= 2x).
 *
 *   node bench/dist/publish-overhead.js [--quick] [--writers 8,32] [--seconds 5] [--trials 3]
 *
 * The same through postgres.js, beside node-postgres: scenarios/publish-postgres-js.ts.
 */
import { randomInt } from 'node:crypto';
import { quoteIdentifier } from '@ferry/core';
import { createPublisher, type Publisher } from '@ferry/publisher';
import { createTestDatabase } from '@ferry/testkit';
import type pg from 'pg';
import { arg, declareFlags, hasFlag } from './lib/args.js';
import { printTable, summarize, writeResult } from './lib/stats.js';
import { type MeteredWriters, medianCpu, meteredNodePostgresWriters } from './lib/writers.js';

declareFlags(
  'node bench/dist/publish-overhead.js',
  'Publisher overhead: (UPDATE + publish, the defaults) against (UPDATE + a plain INSERT of the same JSON), the same with a relay waiting (every transaction NOTIFYs), and publishMany(100) against a 100-row INSERT; interleaved trials, medians.',
  {
    quick: 'short trials (8 writers, 1.5 s, 2 trials)',
    writers: '<n,n,…> concurrent writers, one table each (default 8,32)',
    seconds: '<s> length of one trial (default 5)',
    trials: '<n> interleaved trials (default 3)',
  },
);

const quick = hasFlag('quick');
const writerCounts = arg('writers', quick ? '8' : '8,32')
  .split(',')
  .map(Number);
const seconds = Number(arg('seconds', quick ? '1.5' : '5'));
const trials = Number(arg('trials', quick ? '2' : '3'));
const ACCOUNTS = 10_000;

type Step = (client: pg.PoolClient, i: number) => Promise<void>;

function run(pool: pg.Pool, writers: number, step: Step): Promise<MeteredWriters> {
  return meteredNodePostgresWriters(pool, writers, seconds, step);
}

async function main() {
  const db = await createTestDatabase({ prefix: 'bench_pub', max: Math.max(...writerCounts) + 2 });
  const s = quoteIdentifier(db.schema);
  try {
    await db.pool.query(`CREATE TABLE ${s}.accounts (id int PRIMARY KEY, balance bigint NOT NULL DEFAULT 0)`);
    await db.pool.query(`INSERT INTO ${s}.accounts (id) SELECT generate_series(1, ${ACCOUNTS})`);
    await db.pool.query(`CREATE TABLE ${s}.plain_events (id bigserial PRIMARY KEY, key text NOT NULL, data jsonb NOT NULL)`);
    // The defaults: notify is on, and the outbox sends the NOTIFY only while a relay has recorded that
    // it waits (outbox migration 000007). `publish` runs with no relay waiting (what a busy relay's
    // publishers pay); `publishNotify` with a wait record current throughout, so every transaction
    // NOTIFYs (the most a relay that stays idle could cost its publishers).
    const quiet = createPublisher({ schema: db.schema, source: 'bench' });
    const loud = quiet;
    const relayWaits = (on: boolean) =>
      db.pool.query(
        on
          ? `INSERT INTO ${s}.relay_waiting (instance, until) VALUES ('bench', now() + interval '1 hour') ON CONFLICT (instance) DO UPDATE SET until = excluded.until`
          : `DELETE FROM ${s}.relay_waiting`,
      );
    const payload = (i: number) => ({ orderId: `order-${i}`, total: 4999, currency: 'EUR', lines: [{ sku: 'sku-1', qty: 2 }] });
    const update = (c: pg.PoolClient) =>
      c.query(`UPDATE ${s}.accounts SET balance = balance + 1 WHERE id = $1`, [randomInt(1, ACCOUNTS + 1)]);
    const plain: Step = async (c, i) => {
      await update(c);
      await c.query(`INSERT INTO ${s}.plain_events (key, data) VALUES ($1, $2)`, [`order-${i % 5000}`, JSON.stringify(payload(i))]);
    };
    const viaPublisher =
      (p: Publisher): Step =>
      async (c, i) => {
        await update(c);
        await p.publish(c, { subject: 'orders.placed', key: `order-${i % 5000}`, type: 'OrderPlaced', data: payload(i) });
      };
    const plainMany: Step = async (c, i) => {
      await update(c);
      const keys = Array.from({ length: 100 }, (_, j) => `order-${(i * 100 + j) % 5000}`);
      const datas = keys.map((_, j) => JSON.stringify(payload(i * 100 + j)));
      await c.query(`INSERT INTO ${s}.plain_events (key, data) SELECT * FROM unnest($1::text[], $2::jsonb[])`, [keys, datas]);
    };
    const publishMany: Step = async (c, i) => {
      await update(c);
      await quiet.publishMany(
        c,
        Array.from({ length: 100 }, (_, j) => ({
          subject: 'orders.placed',
          key: `order-${(i * 100 + j) % 5000}`,
          type: 'OrderPlaced',
          data: payload(i * 100 + j),
        })),
      );
    };

    const scenarios: Record<string, Step> = {
      plain: plain,
      publish: viaPublisher(quiet),
      publishNotify: viaPublisher(loud),
      plainMany100: plainMany,
      publishMany100: publishMany,
    };
    const results: Record<string, Record<string, ReturnType<typeof summarize>>> = {};
    // CPU per transaction, this process's and the backends' together, µs.
    const cpu: Record<string, Record<string, ReturnType<typeof summarize>>> = {};
    // The same, split: this process's (the publisher and node-postgres) and the backends'.
    const cpuSplit: Record<string, Record<string, ReturnType<typeof medianCpu>>> = {};
    for (const writers of writerCounts) {
      const samples: Record<string, MeteredWriters[]> = Object.fromEntries(Object.keys(scenarios).map((k) => [k, []]));
      await run(db.pool, writers, plain); // warm-up
      for (let t = 0; t < trials; t++) {
        for (const [name, step] of Object.entries(scenarios)) {
          if (name === 'publishNotify') await relayWaits(true);
          samples[name]?.push(await run(db.pool, writers, step));
          if (name === 'publishNotify') await relayWaits(false);
        }
      }
      results[writers] = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, summarize(v.map((m) => m.perSecond))]));
      cpu[writers] = Object.fromEntries(
        Object.entries(samples).map(([k, v]) => [k, summarize(v.map((m) => m.clientMicros + m.backendMicros))]),
      );
      cpuSplit[writers] = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, medianCpu(v)]));
    }

    const rows: Array<Array<string | number>> = [];
    const ratios: Record<string, number> = {};
    const cpuRatios: Record<string, number> = {};
    for (const [writers, r] of Object.entries(results)) {
      const base = r.plain?.median ?? Number.NaN;
      const baseMany = r.plainMany100?.median ?? Number.NaN;
      const c = cpu[writers] ?? {};
      for (const [name, sum] of Object.entries(r)) {
        const many = name.endsWith('100');
        const overhead = (many ? baseMany : base) / sum.median;
        const cpuMedian = c[name]?.median ?? Number.NaN;
        const cpuOverhead = cpuMedian / ((many ? c.plainMany100 : c.plain)?.median ?? Number.NaN);
        const split = cpuSplit[writers]?.[name];
        rows.push([
          writers,
          name,
          sum.median,
          `±${(sum.spread * 100).toFixed(0)}%`,
          name.startsWith('plain') ? '(baseline)' : `${overhead.toFixed(2)}x`,
          Math.round(cpuMedian),
          `${Math.round(split?.client ?? Number.NaN)} / ${Math.round(split?.backend ?? Number.NaN)}`,
          name.startsWith('plain') ? '(baseline)' : `${cpuOverhead.toFixed(2)}x`,
        ]);
        if (!name.startsWith('plain')) {
          ratios[`${name}@${writers}`] = Number(overhead.toFixed(3));
          cpuRatios[`${name}@${writers}`] = Number(cpuOverhead.toFixed(3));
        }
      }
    }
    printTable(
      `Publisher overhead (${seconds}s x ${trials} interleaved trials; overhead = baseline tx/s / publisher tx/s; CPU = this process + the writers' PostgreSQL backends per transaction; issue 46 budgets the CPU against the bare statement: publish-function-cost)`,
      ['writers', 'scenario', 'tx/s (median)', 'spread', 'overhead', 'CPU µs/tx', 'client / backend', 'CPU ratio'],
      rows,
    );
    const file = writeResult('publisher', {
      scenario: 'publish-overhead',
      seconds,
      trials,
      results,
      ratios,
      cpuMicrosPerTx: cpu,
      cpuSplitMicrosPerTx: cpuSplit,
      cpuRatios,
      publishOverhead: ratios[`publish@${writerCounts[0]}`],
      txPerSec: results[writerCounts[0] as number]?.publish?.median,
    });
    console.log(`\nwrote ${file}`);
  } finally {
    await db.close();
  }
}

await main();
