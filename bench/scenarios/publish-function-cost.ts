/**
 * What the publish function costs end to end beside the statement it runs:
 * 8 node-postgres writers, each transaction a business UPDATE and one event,
 * as `publish-overhead` does, for five ways of writing the event:
 *
 *   plain       the baseline, an INSERT of the same JSON into a bigserial table;
 *   publish     the publisher (`publish`, the defaults: generated id, next version);
 *   function    `publish_event` called directly, the values the publisher would send;
 *   no-notify   a copy of `publish_event` without its NOTIFY check;
 *   statement   the key_versions upsert and the outbox insert as one named statement
 *               (no function, no checks, no NOTIFY check: what a role with table
 *               grants could send instead).
 *
 * Interleaved trials, medians; ratios against `plain` in the same run. Not part
 * of npm run bench.
 *
 *   node bench/dist/scenarios/publish-function-cost.js [--trials 7] [--seconds 3] [--writers 8]
 */
import { randomInt } from 'node:crypto';
import { quoteIdentifier } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createTestDatabase } from '@ferry/testkit';
import type pg from 'pg';
import { v7 as uuidv7 } from 'uuid';
import { declareFlags, numArg } from '../lib/args.js';
import { printTable, summarize, writeResult } from '../lib/stats.js';
import { loopNodePostgresWriters } from '../lib/writers.js';

declareFlags(
  'node bench/dist/scenarios/publish-function-cost.js',
  'The publish function against the statement it runs: publisher, publish_event called directly, a copy without its NOTIFY check, and the bare upsert + insert, each with a business UPDATE, against a plain INSERT (not part of npm run bench).',
  {
    trials: '<n> interleaved trials (default 7)',
    seconds: '<s> seconds per trial and variant (default 3)',
    writers: '<n> concurrent writers (default 8)',
  },
);

const TRIALS = numArg('trials', 7);
const SECONDS = numArg('seconds', 3);
const WRITERS = numArg('writers', 8);
const ACCOUNTS = 10_000;
const SIGNATURE = 'uuid, text, bigint, text, text, text, text, bytea, jsonb, timestamptz, text, boolean';

async function main() {
  const db = await createTestDatabase({ prefix: 'bench_pubfn', max: WRITERS + 2 });
  const s = quoteIdentifier(db.schema);
  try {
    await db.pool.query(`CREATE TABLE ${s}.accounts (id int PRIMARY KEY, balance bigint NOT NULL DEFAULT 0)`);
    await db.pool.query(`INSERT INTO ${s}.accounts (id) SELECT generate_series(1, ${ACCOUNTS})`);
    await db.pool.query(`CREATE TABLE ${s}.plain_events (id bigserial PRIMARY KEY, key text NOT NULL, data jsonb NOT NULL)`);
    // The shipped function as it is, under another name, without its last IF (the NOTIFY check).
    await db.pool.query(`DO $copy$
DECLARE v_def text := pg_get_functiondef('${s}.publish_event(${SIGNATURE})'::regprocedure);
BEGIN
  v_def := regexp_replace(replace(v_def, '.publish_event(', '.bench_no_notify('), 'IF p_channel IS NOT NULL.*?END IF;', '');
  IF v_def ~ 'pg_notify' THEN
    RAISE EXCEPTION 'publish_event has no NOTIFY check where this scenario expects it';
  END IF;
  EXECUTE v_def;
END
$copy$`);
    const publisher = createPublisher({ schema: db.schema, source: 'bench' });
    const channel = `ferry_${db.schema}`;
    const payload = (i: number) => ({ orderId: `order-${i}`, total: 4999, currency: 'EUR', lines: [{ sku: 'sku-1', qty: 2 }] });
    const update = (c: pg.PoolClient) =>
      c.query(`UPDATE ${s}.accounts SET balance = balance + 1 WHERE id = $1`, [randomInt(1, ACCOUNTS + 1)]);
    const values = (i: number) => [
      uuidv7(),
      `order-${i % 5000}`,
      null,
      'orders.placed',
      'OrderPlaced',
      'bench',
      'application/json',
      Buffer.from(JSON.stringify(payload(i))),
      '{}',
      new Date().toISOString(),
      channel,
      false,
    ];
    const call = (fn: string) => ({
      name: `bench_${fn}`,
      text: `SELECT id, seq, version, existing, same FROM ${s}.${fn}($1::uuid, $2::text, $3::bigint, $4::text, $5::text, $6::text, $7::text, $8::bytea, $9::jsonb, $10::timestamptz, $11::text, $12::boolean)`,
    });
    const statement = {
      name: 'bench_statement',
      text: `WITH b AS (INSERT INTO ${s}.key_versions AS kv (key, version) VALUES ($2, 1)
                       ON CONFLICT (key) DO UPDATE SET version = kv.version + 1 RETURNING kv.version)
             INSERT INTO ${s}.outbox AS o (id, key, version, subject, type, source, content_type, data, headers, occurred_at)
             SELECT $1::uuid, $2, b.version, $3, $4, $5, $6, $7::bytea, $8::jsonb, $9::timestamptz FROM b
             RETURNING o.id::text, o.seq, o.version`,
    };
    type Step = (c: pg.PoolClient, i: number) => Promise<void>;
    const steps: Record<string, Step> = {
      plain: async (c, i) => {
        await update(c);
        await c.query(`INSERT INTO ${s}.plain_events (key, data) VALUES ($1, $2)`, [`order-${i % 5000}`, JSON.stringify(payload(i))]);
      },
      publish: async (c, i) => {
        await update(c);
        await publisher.publish(c, { subject: 'orders.placed', key: `order-${i % 5000}`, type: 'OrderPlaced', data: payload(i) });
      },
      function: async (c, i) => {
        await update(c);
        await c.query({ ...call('publish_event'), values: values(i) });
      },
      'no-notify': async (c, i) => {
        await update(c);
        await c.query({ ...call('bench_no_notify'), values: values(i) });
      },
      statement: async (c, i) => {
        await update(c);
        // The function's values less the version (always null here), the channel and the check flag.
        const v = values(i);
        await c.query({ ...statement, values: [v[0], v[1], ...v.slice(3, 10)] });
      },
    };
    const samples: Record<string, number[]> = Object.fromEntries(Object.keys(steps).map((k) => [k, []]));
    await loopNodePostgresWriters(db.pool, WRITERS, 2, steps.plain as Step); // warm-up
    for (let t = 0; t < TRIALS; t++) {
      for (const [name, step] of Object.entries(steps)) samples[name]?.push(await loopNodePostgresWriters(db.pool, WRITERS, SECONDS, step));
    }
    const results = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, summarize(v)]));
    const base = results.plain?.median ?? Number.NaN;
    const ratios = Object.fromEntries(Object.entries(results).map(([k, r]) => [k, Number((base / r.median).toFixed(3))]));
    printTable(
      `Publish function cost (${WRITERS} writers, ${SECONDS}s x ${TRIALS} interleaved trials; ratio = plain tx/s / variant tx/s)`,
      ['variant', 'tx/s (median)', 'spread', 'ratio'],
      Object.entries(results).map(([k, r]) => [k, Math.round(r.median), `±${(r.spread * 100).toFixed(0)}%`, `${ratios[k]?.toFixed(2)}x`]),
    );
    const file = writeResult('publish-function-cost', {
      scenario: 'publish-function-cost',
      writers: WRITERS,
      seconds: SECONDS,
      trials: TRIALS,
      results,
      ratios,
    });
    console.log(`\nwrote ${file}`);
  } finally {
    await db.close();
  }
}

await main();
