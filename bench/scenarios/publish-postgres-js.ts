/**
 * Publisher overhead through postgres.js, beside node-postgres, same run:
 * transactions per second of (business UPDATE + publish) against (business
 * UPDATE + INSERT of the same JSON into a plain table), for each driver, N
 * concurrent writers, trials interleaved across all four scenarios. Each
 * overhead is against the plain insert through the same driver.
 */
import { randomInt } from 'node:crypto';
import { quoteIdentifier } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { fromPostgresJs } from '@ferry/publisher/postgres-js';
import { createTestDatabase } from '@ferry/testkit';
import type pg from 'pg';
import postgres from 'postgres';
import { declareFlags, hasFlag, numArg } from '../lib/args.js';
import { printTable, summarize, writeResult } from '../lib/stats.js';
import { loopNodePostgresWriters, loopWriters } from '../lib/writers.js';

declareFlags(
  'node bench/dist/scenarios/publish-postgres-js.js',
  'Publisher overhead through postgres.js and node-postgres, same run. Overhead = plain tx/s / publish tx/s through the same driver (1.00x = free).',
  {
    quick: 'short trials (1.5 s, 2 trials)',
    writers: '<n> concurrent writers (connections per driver; default 8)',
    seconds: '<s> length of one trial of one scenario (default 5)',
    trials: '<n> interleaved trials per scenario; the median is reported with the spread (default 3)',
  },
);

const QUICK = hasFlag('quick');
const WRITERS = numArg('writers', 8);
const SECONDS = numArg('seconds', QUICK ? 1.5 : 5);
const TRIALS = numArg('trials', QUICK ? 2 : 3);
const ACCOUNTS = 10_000;

const payload = (i: number) => ({ orderId: `order-${i}`, total: 4999, currency: 'EUR', lines: [{ sku: 'sku-1', qty: 2 }] });
const key = (i: number) => `order-${i % 5000}`;

const db = await createTestDatabase({ prefix: 'bench_pgjs', max: WRITERS + 2 });
const s = quoteIdentifier(db.schema);
const sql = postgres(db.url, { max: WRITERS, onnotice: () => {} });
try {
  await db.pool.query(`CREATE TABLE ${s}.accounts (id int PRIMARY KEY, balance bigint NOT NULL DEFAULT 0)`);
  await db.pool.query(`INSERT INTO ${s}.accounts (id) SELECT generate_series(1, ${ACCOUNTS})`);
  await db.pool.query(`CREATE TABLE ${s}.plain_events (id bigserial PRIMARY KEY, key text NOT NULL, data jsonb NOT NULL)`);
  const publisher = createPublisher({ schema: db.schema, source: 'bench' });

  /** node-postgres: BEGIN, the step, COMMIT on one checked-out client per writer. */
  const viaNodePostgres = (step: (c: pg.PoolClient, i: number) => Promise<void>) => (seconds: number) =>
    loopNodePostgresWriters(db.pool, WRITERS, seconds, step);
  /** postgres.js: sql.begin, as its users write transactions. */
  const viaPostgresJs = (step: (tx: postgres.TransactionSql, i: number) => Promise<void>) => (seconds: number) =>
    loopWriters(WRITERS, seconds, async (_, i) => {
      await sql.begin((tx) => step(tx, i));
    });

  const pgUpdate = (c: pg.PoolClient) =>
    c.query(`UPDATE ${s}.accounts SET balance = balance + 1 WHERE id = $1`, [randomInt(1, ACCOUNTS + 1)]);
  const jsUpdate = (tx: postgres.TransactionSql) =>
    tx`UPDATE ${tx(db.schema)}.accounts SET balance = balance + 1 WHERE id = ${randomInt(1, ACCOUNTS + 1)}`;
  const event = (i: number) => ({ subject: 'orders.placed', key: key(i), type: 'OrderPlaced', data: payload(i) });

  const scenarios: Record<string, { driver: string; name: string; run: (seconds: number) => Promise<number> }> = {
    'node-postgres plain': {
      driver: 'node-postgres',
      name: 'plain',
      run: viaNodePostgres(async (c, i) => {
        await pgUpdate(c);
        await c.query(`INSERT INTO ${s}.plain_events (key, data) VALUES ($1, $2)`, [key(i), JSON.stringify(payload(i))]);
      }),
    },
    'node-postgres publish': {
      driver: 'node-postgres',
      name: 'publish',
      run: viaNodePostgres(async (c, i) => {
        await pgUpdate(c);
        await publisher.publish(c, event(i));
      }),
    },
    'postgres.js plain': {
      driver: 'postgres.js',
      name: 'plain',
      run: viaPostgresJs(async (tx, i) => {
        await jsUpdate(tx);
        await tx`INSERT INTO ${tx(db.schema)}.plain_events (key, data) VALUES (${key(i)}, ${tx.json(payload(i))})`;
      }),
    },
    'postgres.js publish': {
      driver: 'postgres.js',
      name: 'publish',
      run: viaPostgresJs(async (tx, i) => {
        await jsUpdate(tx);
        await publisher.publish(fromPostgresJs(tx), event(i));
      }),
    },
  };

  // Warm-up: connections opened, statements prepared, code paths compiled.
  for (const scenario of Object.values(scenarios)) await scenario.run(Math.min(1, SECONDS));
  const samples = new Map<string, number[]>(Object.keys(scenarios).map((k) => [k, []]));
  for (let t = 0; t < TRIALS; t++) {
    for (const [label, scenario] of Object.entries(scenarios)) samples.get(label)?.push(await scenario.run(SECONDS));
  }
  const results = Object.fromEntries([...samples].map(([k, v]) => [k, summarize(v)]));
  const overhead = (driver: string) =>
    Number(((results[`${driver} plain`]?.median ?? Number.NaN) / (results[`${driver} publish`]?.median ?? Number.NaN)).toFixed(3));
  const overheads = { 'node-postgres': overhead('node-postgres'), 'postgres.js': overhead('postgres.js') };

  printTable(
    `Publisher overhead by driver (${WRITERS} writers, ${SECONDS}s x ${TRIALS} interleaved trials; overhead = plain tx/s / publish tx/s, same driver)`,
    ['driver', 'scenario', 'tx/s (median)', 'spread', 'overhead'],
    Object.entries(scenarios).map(([label, { driver, name }]) => {
      const sum = results[label] as ReturnType<typeof summarize>;
      return [
        driver,
        name,
        sum.median,
        `±${(sum.spread * 100).toFixed(0)}%`,
        name === 'plain' ? '(baseline)' : `${overheads[driver as keyof typeof overheads].toFixed(2)}x`,
      ];
    }),
  );
  const file = writeResult('publish-postgres-js', {
    scenario: 'publish-postgres-js',
    writers: WRITERS,
    seconds: SECONDS,
    trials: TRIALS,
    results,
    overheads,
  });
  console.log(`\nwrote ${file}`);
} finally {
  await sql.end();
  await db.close();
}
