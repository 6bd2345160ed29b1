/**
 * What the publish costs beside the writes it must make, as CPU per
 * transaction (this process + the writers' PostgreSQL backends, /proc) and as
 * throughput: 8 node-postgres writers, each transaction a business UPDATE and
 * the events, as `publish-overhead` does. One event per transaction:
 *
 *   plain       the baseline, an INSERT of the same JSON into a bigserial table;
 *   publish     the publisher (`publish`, the defaults: generated id, next version);
 *   function    `publish_event` called directly, the values the publisher would send;
 *   statement   the key_versions upsert and the outbox insert (with its pending row,
 *               by trigger) as one named statement, sent by the owner: no function,
 *               no checks, no NOTIFY check. The writes DESIGN.md requires, nothing else;
 *   rows        the outbox insert alone, versions from a sequence (unique, so the
 *               (key, version) index accepts them): no per-key counter at all, the
 *               floor of any way of assigning versions;
 *   bare        the same insert into a copy of the outbox (its columns, indexes and
 *               constraints, not its trigger): the event row without its pending row.
 *
 * And 100 events per transaction: plain100 (one 100-row INSERT), publishMany100,
 * statement100 (publish_events' short path without its checks), rows100 and bare100.
 *
 * Interleaved trials, medians; ratios against the plain variant of the same
 * size in the same run, and the budgets (issue 46): the publisher's CPU per
 * transaction <= 1.15x the statement's, for publish and for publishMany(100).
 * Part of npm run bench (latest.json: publishCpuVsStatement1, ...100).
 *
 *   node bench/dist/scenarios/publish-function-cost.js [--trials 5] [--seconds 3] [--writers 8]
 */
import { randomInt } from 'node:crypto';
import { notifyChannel, quoteIdentifier } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createTestDatabase } from '@ferry/testkit';
import type pg from 'pg';
import { v7 as uuidv7 } from 'uuid';
import { benchFlags } from '../lib/args.js';
import { printTable, summarize, writeResult } from '../lib/stats.js';
import { type MeteredWriters, medianCpu, meteredNodePostgresWriters } from '../lib/writers.js';

const flags = benchFlags(
  "The publish against the writes it must make: publisher, publish_event called directly, the bare upsert + insert, and the insert alone, each with a business UPDATE, against a plain INSERT; the same for 100 events per transaction; CPU per transaction; budget: publisher CPU <= 1.15x that statement's.",
  {
    trials: ['<n> interleaved trials', 5],
    seconds: ['<s> seconds per trial and variant', 3],
    writers: ['<n> concurrent writers', 8],
  },
);

const ACCOUNTS = 10_000;
const BATCH = 100;

const ratioOf = (a: number | undefined, b: number | undefined) => Number(((a ?? Number.NaN) / (b ?? Number.NaN)).toFixed(3));

async function main() {
  const db = await createTestDatabase({ prefix: 'bench_pubfn', max: flags.writers + 2 });
  const s = quoteIdentifier(db.schema);
  try {
    await db.pool.query(`CREATE TABLE ${s}.accounts (id int PRIMARY KEY, balance bigint NOT NULL DEFAULT 0)`);
    await db.pool.query(`INSERT INTO ${s}.accounts (id) SELECT generate_series(1, ${ACCOUNTS})`);
    await db.pool.query(`CREATE TABLE ${s}.plain_events (id bigserial PRIMARY KEY, key text NOT NULL, data jsonb NOT NULL)`);
    await db.pool.query(`CREATE SEQUENCE ${s}.bench_versions START 1000000000000`);
    await db.pool.query(`CREATE TABLE ${s}.bare_events (LIKE ${s}.outbox INCLUDING ALL)`);
    const publisher = createPublisher({ schema: db.schema, source: 'bench' });
    const channel = notifyChannel(db.schema);
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
    // The same writes by the hundred: publish_events' short path (outbox migration 000008) without its checks.
    const statementMany = {
      name: 'bench_statement_many',
      text: `WITH input AS (
               SELECT t.*, row_number() OVER (PARTITION BY t.key ORDER BY t.ord) AS rank, count(*) OVER (PARTITION BY t.key) AS n
               FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bytea[], $8::jsonb[], $9::timestamptz[])
                      WITH ORDINALITY AS t(id, key, subject, type, source, content_type, data, headers, occurred_at, ord)
             ),
             bump AS (
               INSERT INTO ${s}.key_versions AS kv (key, version)
               SELECT i.key, count(*) FROM input i GROUP BY i.key ORDER BY i.key
               ON CONFLICT (key) DO UPDATE SET version = kv.version + excluded.version
               RETURNING kv.key, kv.version
             )
             INSERT INTO ${s}.outbox AS o (id, key, version, subject, type, source, content_type, data, headers, occurred_at)
             SELECT i.id, i.key, b.version - i.n + i.rank, i.subject, i.type, i.source, i.content_type, i.data, i.headers, i.occurred_at
             FROM input i JOIN bump b ON b.key = i.key
             ORDER BY i.ord
             RETURNING o.id::text, o.seq, o.version`,
    };
    // The outbox rows alone: versions from a sequence, no per-key counter.
    const rows = (table: string) => ({
      name: `bench_${table}`,
      text: `INSERT INTO ${s}.${table} AS o (id, key, version, subject, type, source, content_type, data, headers, occurred_at)
             VALUES ($1::uuid, $2, nextval('${s}.bench_versions'), $3, $4, $5, $6, $7::bytea, $8::jsonb, $9::timestamptz)
             RETURNING o.id::text, o.seq, o.version`,
    });
    const rowsMany = (table: string) => ({
      name: `bench_${table}_many`,
      text: `INSERT INTO ${s}.${table} AS o (id, key, version, subject, type, source, content_type, data, headers, occurred_at)
             SELECT t.id, t.key, nextval('${s}.bench_versions'), t.subject, t.type, t.source, t.content_type, t.data, t.headers, t.occurred_at
             FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bytea[], $8::jsonb[], $9::timestamptz[])
                    WITH ORDINALITY AS t(id, key, subject, type, source, content_type, data, headers, occurred_at, ord)
             ORDER BY t.ord
             RETURNING o.id::text, o.seq, o.version`,
    });
    /** The nine columns of `BATCH` events, as arrays, the values the publisher would send. */
    const columns = (i: number) => {
      const v = Array.from({ length: BATCH }, (_, j) => values(i * BATCH + j));
      return [0, 1, 3, 4, 5, 6, 7, 8, 9].map((col) => v.map((e) => e[col]));
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
      statement: async (c, i) => {
        await update(c);
        // The function's values less the version (always null here), the channel and the check flag.
        const v = values(i);
        await c.query({ ...statement, values: [v[0], v[1], ...v.slice(3, 10)] });
      },
      rows: async (c, i) => {
        await update(c);
        const v = values(i);
        await c.query({ ...rows('outbox'), values: [v[0], v[1], ...v.slice(3, 10)] });
      },
      bare: async (c, i) => {
        await update(c);
        const v = values(i);
        await c.query({ ...rows('bare_events'), values: [v[0], v[1], ...v.slice(3, 10)] });
      },
      plain100: async (c, i) => {
        await update(c);
        const keys = Array.from({ length: BATCH }, (_, j) => `order-${(i * BATCH + j) % 5000}`);
        const datas = keys.map((_, j) => JSON.stringify(payload(i * BATCH + j)));
        await c.query(`INSERT INTO ${s}.plain_events (key, data) SELECT * FROM unnest($1::text[], $2::jsonb[])`, [keys, datas]);
      },
      publishMany100: async (c, i) => {
        await update(c);
        await publisher.publishMany(
          c,
          Array.from({ length: BATCH }, (_, j) => ({
            subject: 'orders.placed',
            key: `order-${(i * BATCH + j) % 5000}`,
            type: 'OrderPlaced',
            data: payload(i * BATCH + j),
          })),
        );
      },
      statement100: async (c, i) => {
        await update(c);
        await c.query({ ...statementMany, values: columns(i) });
      },
      rows100: async (c, i) => {
        await update(c);
        await c.query({ ...rowsMany('outbox'), values: columns(i) });
      },
      bare100: async (c, i) => {
        await update(c);
        await c.query({ ...rowsMany('bare_events'), values: columns(i) });
      },
    };
    const samples: Record<string, MeteredWriters[]> = Object.fromEntries(Object.keys(steps).map((k) => [k, []]));
    await meteredNodePostgresWriters(db.pool, flags.writers, 2, steps.plain as Step); // warm-up
    for (let t = 0; t < flags.trials; t++) {
      for (const [name, step] of Object.entries(steps))
        samples[name]?.push(await meteredNodePostgresWriters(db.pool, flags.writers, flags.seconds, step));
    }
    const results = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, summarize(v.map((m) => m.perSecond))]));
    const cpu = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, medianCpu(v)]));
    const baseOf = (k: string) => (k.endsWith(String(BATCH)) ? `plain${BATCH}` : 'plain');
    const ratios = Object.fromEntries(
      Object.keys(samples).map((k) => [
        k,
        Number(((results[baseOf(k)]?.median ?? Number.NaN) / (results[k]?.median ?? Number.NaN)).toFixed(3)),
      ]),
    );
    const cpuRatios = Object.fromEntries(
      Object.keys(samples).map((k) => [k, Number(((cpu[k]?.micros ?? Number.NaN) / (cpu[baseOf(k)]?.micros ?? Number.NaN)).toFixed(3))]),
    );
    printTable(
      `Publish cost (${flags.writers} writers, ${flags.seconds}s x ${flags.trials} interleaved trials; tx ratio = plain tx/s / variant tx/s; CPU = this process + the writers' backends per transaction, ratio to the plain variant of the same size)`,
      ['variant', 'tx/s (median)', 'spread', 'tx ratio', 'CPU µs/tx', 'client / backend', 'CPU ratio'],
      Object.entries(results).map(([k, r]) => [
        k,
        Math.round(r.median),
        `±${(r.spread * 100).toFixed(0)}%`,
        `${ratios[k]?.toFixed(2)}x`,
        Math.round(cpu[k]?.micros ?? Number.NaN),
        `${Math.round(cpu[k]?.client ?? Number.NaN)} / ${Math.round(cpu[k]?.backend ?? Number.NaN)}`,
        `${cpuRatios[k]?.toFixed(2)}x`,
      ]),
    );
    const statementRatios = {
      publish: ratioOf(cpu.publish?.micros, cpu.statement?.micros),
      publishMany100: ratioOf(cpu[`publishMany${BATCH}`]?.micros, cpu[`statement${BATCH}`]?.micros),
    };
    console.log(
      `publisher CPU / the bare statement's (budget <= 1.15x): publish ${statementRatios.publish.toFixed(2)}x, publishMany${BATCH} ${statementRatios.publishMany100.toFixed(2)}x`,
    );
    const file = writeResult('publish-function-cost', {
      scenario: 'publish-function-cost',
      writers: flags.writers,
      seconds: flags.seconds,
      trials: flags.trials,
      batch: BATCH,
      results,
      ratios,
      cpuMicrosPerTx: cpu,
      cpuRatios,
      /** The publisher's CPU per transaction / the owner's bare statement of the same writes (budget <= 1.15 each). */
      statementRatios,
    });
    console.log(`\nwrote ${file}`);
  } finally {
    await db.close();
  }
}

await main();
