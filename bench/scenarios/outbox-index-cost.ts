/**
 * What each part of an outbox row costs PostgreSQL, measured inside one
 * server-side loop (no client, no round trips): 100-row inserts into a copy of
 * the outbox with all its indexes and, as the outbox's trigger does since
 * outbox migration 000015, each row's pending row inserted into a copy of
 * outbox_pending (with its indexes), then with them dropped one at a time, and
 * beside them the pieces of `publish_events` (the checks, the key_versions
 * upsert, the whole function) and the benchmark's baseline, a 100-row insert
 * into a three-column table with one index. µs per row, median of the rounds;
 * each round starts from empty tables.
 *
 *   node bench/dist/scenarios/outbox-index-cost.js [--rounds 3] [--batches 200]
 */
import { quoteIdentifier } from '@ferry/core';
import { createTestDatabase } from '@ferry/testkit';
import { benchFlags } from '../lib/args.js';
import { printMedians, writeResult } from '../lib/stats.js';

const flags = benchFlags(
  'What each index and piece of the publish path costs PostgreSQL per row: 100-row inserts timed in a server-side loop (not part of npm run bench).',
  {
    rounds: ['<n> rounds, each from empty tables', 3],
    batches: ['<n> 100-row batches per measurement', 200],
  },
);

/** In the order they are dropped from the copy; each figure is the cost of the steps before it. */
const STEPS = [
  ['all indexes', ''],
  ['UNIQUE (key, version)', 'ALTER TABLE %T DROP CONSTRAINT ob_copy_key_version_key'],
  ['pending row (trigger, outbox_pending copy)', 'DROP TRIGGER ob_copy_enqueue ON %T'],
  ['UNIQUE (id)', 'ALTER TABLE %T DROP CONSTRAINT ob_copy_id_key'],
  ['PRIMARY KEY (seq)', 'ALTER TABLE %T DROP CONSTRAINT ob_copy_pkey'],
  ['generated lane column', 'ALTER TABLE %T DROP COLUMN lane'],
] as const;

function loopSql(s: string, label: string, body: string): string {
  // One batch of 100 events' arrays per iteration, built outside the timed statement.
  return `DO $bench$
DECLARE
  keys text[]; subs text[]; types text[]; srcs text[]; cts text[]; datas bytea[]; hdrs jsonb[]; ats timestamptz[]; ids uuid[];
  vers bigint[]; jdatas jsonb[]; t0 timestamptz; spent interval := '0'; ok boolean;
BEGIN
  FOR it IN 1..${flags.batches} LOOP
    SELECT array_agg('order-' || ((it * 100 + j) % 5000)), array_agg('orders.placed'::text), array_agg('OrderPlaced'::text),
           array_agg('bench'::text), array_agg('application/json'::text),
           array_agg(convert_to('{"orderId":"order-123","total":4999,"currency":"EUR","lines":[{"sku":"sku-1","qty":2}]}', 'UTF8')),
           array_agg('{}'::jsonb), array_agg(now()), array_agg(gen_random_uuid()), array_agg(NULL::bigint),
           array_agg('{"orderId":"order-123","total":4999,"currency":"EUR","lines":[{"sku":"sku-1","qty":2}]}'::jsonb)
      INTO keys, subs, types, srcs, cts, datas, hdrs, ats, ids, vers, jdatas FROM generate_series(1, 100) j;
    t0 := clock_timestamp();
    ${body}
    spent := spent + (clock_timestamp() - t0);
  END LOOP;
  INSERT INTO ${s}.bench_timings (label, us_per_row) VALUES (${quoteLiteral(label)}, extract(epoch FROM spent) * 1e6 / (${flags.batches} * 100));
END
$bench$`;
}

function quoteLiteral(text: string): string {
  return `'${text.replaceAll("'", "''")}'`;
}

async function main() {
  const db = await createTestDatabase({ prefix: 'bench_ixcost', max: 2 });
  const s = quoteIdentifier(db.schema);
  const copy = `${s}.ob_copy`;
  const copyPending = `${s}.ob_copy_pending`;
  const samples: Record<string, number[]> = {};
  try {
    await db.pool.query(`CREATE TABLE ${s}.bench_timings (label text NOT NULL, us_per_row double precision NOT NULL)`);
    await db.pool.query(`CREATE TABLE ${s}.plain_events (id bigserial PRIMARY KEY, key text NOT NULL, data jsonb NOT NULL)`);
    const insertCopy = `INSERT INTO ${copy} (id, key, version, subject, type, source, content_type, data, headers, occurred_at)
      SELECT * FROM unnest(ids, keys, array_fill(it::bigint, ARRAY[100]), subs, types, srcs, cts, datas, hdrs, ats);`;
    for (let round = 0; round < flags.rounds; round++) {
      await db.pool.query(`TRUNCATE ${s}.outbox, ${s}.key_versions, ${s}.plain_events`);
      await db.pool.query(
        loopSql(
          s,
          'baseline: plain 3-column insert, 1 index',
          `INSERT INTO ${s}.plain_events (key, data) SELECT * FROM unnest(keys, jdatas);`,
        ),
      );
      await db.pool.query(
        loopSql(s, 'publish_events_ok (the checks)', `ok := ${s}.publish_events_ok(keys, subs, types, srcs, cts, hdrs);`),
      );
      await db.pool.query(
        loopSql(
          s,
          'key_versions upsert (per key)',
          `INSERT INTO ${s}.key_versions AS kv (key, version) SELECT k, 1 FROM unnest(keys) k GROUP BY k ORDER BY k
             ON CONFLICT (key) DO UPDATE SET version = kv.version + excluded.version;`,
        ),
      );
      await db.pool.query(
        loopSql(
          s,
          'publish_events (the whole function)',
          `PERFORM * FROM ${s}.publish_events(ids, keys, vers, subs, types, srcs, cts, datas, hdrs, ats, NULL, false);`,
        ),
      );
      await db.pool.query(`DROP TABLE IF EXISTS ${copy}, ${copyPending}; CREATE TABLE ${copy} (LIKE ${s}.outbox INCLUDING ALL)`);
      // The pending rows (outbox migration 000015): a copy of outbox_pending, filled by a trigger like the outbox's.
      await db.pool.query(`CREATE TABLE ${copyPending} (LIKE ${s}.outbox_pending INCLUDING ALL)`);
      await db.pool.query(`CREATE OR REPLACE FUNCTION ${s}.ob_copy_enqueue() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  INSERT INTO ${copyPending} (seq, lane, key) SELECT n.seq, n.lane, n.key FROM ob_new n;
  RETURN NULL;
END
$fn$`);
      await db.pool.query(
        `CREATE TRIGGER ob_copy_enqueue AFTER INSERT ON ${copy} REFERENCING NEW TABLE AS ob_new FOR EACH STATEMENT EXECUTE FUNCTION ${s}.ob_copy_enqueue()`,
      );
      for (const [label, drop] of STEPS) {
        if (drop) await db.pool.query(drop.replaceAll('%T', copy).replaceAll('%S', s));
        await db.pool.query(`TRUNCATE ${copy}, ${copyPending}`);
        await db.pool.query(loopSql(s, `outbox row, ${drop ? `without ${label} and those above` : label}`, `${insertCopy}`));
      }
      const { rows } = await db.pool.query<{ label: string; us: number }>(`SELECT label, us_per_row AS us FROM ${s}.bench_timings`);
      await db.pool.query(`TRUNCATE ${s}.bench_timings`);
      for (const r of rows) {
        const list = samples[r.label] ?? [];
        list.push(r.us);
        samples[r.label] = list;
      }
    }
    const results = printMedians(
      `PostgreSQL time per row, 100-row statements in a server-side loop (median of ${flags.rounds} rounds of ${flags.batches} batches)`,
      ['what', 'µs per row'],
      samples,
    );
    const file = writeResult('outbox-index-cost', { scenario: 'outbox-index-cost', ...flags, usPerRow: results });
    console.log(`\nwrote ${file}`);
  } finally {
    await db.close();
  }
}

await main();
