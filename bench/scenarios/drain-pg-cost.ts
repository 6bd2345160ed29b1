/**
 * What a drain costs PostgreSQL per event, split by statement: the relay's
 * claim and its mark, as the relay sends them (its SQL, `claimBatchSql` and
 * `markPublishedSql`, on the real schema: since outbox migration 000015 the
 * claim walks outbox_pending and the mark moves the rows from outbox_pending
 * to outbox_published; same parameters as its defaults), each on a
 * connection of its own so that each backend's CPU
 * (utime + stime from /proc: PostgreSQL must run on this host) is one
 * statement kind's. No NATS: the rows claimed are marked as if acknowledged.
 * Trials drain a fresh backlog each, after a vacuum; medians.
 *
 * Then the marks of other data models, measured the same way on tables of
 * the outbox's shape before outbox migration 000015 (issue 30: which design
 * could bring the relay's PostgreSQL CPU per event to the 8 µs budget; they
 * are the comparison, kept as they were), interleaved per trial:
 * - row (before 000015): `published_at` is set on the row, a non-HOT update
 *   (it is in the pending and published indexes' predicates), four index
 *   inserts: the relay's mark until outbox migration 000015;
 * - row, HOT: the same update with `published_at` in no index (the floor of
 *   any per-row update; the pending rows would need another index);
 * - narrow pending table: the pending rows' seq, lane and key in a table of
 *   their own (the claim's (lane, key, seq) index on it), the mark deletes
 *   them by seq (the event row is never rewritten). This is what the relay
 *   does since outbox migration 000015 (outbox_pending, measured above with
 *   the relay's own statements); its real mark also inserts an
 *   outbox_published row per event and checks the lanes' leases, which this
 *   variant leaves out;
 * - lane cursor: an append-only log read per lane from a cursor, the mark
 *   one cursor row per lane per statement; with its claim, a range scan of
 *   (lane, seq) after the cursor.
 * Beside each mark, what the design's indexes cost the insert of the rows
 * (one 20,000-row statement on the measured connection).
 *
 *   node bench/dist/scenarios/drain-pg-cost.js [--quick] [--events 20000] [--keys 1000] [--trials 5] [--mark-batch 100]
 */
import { quoteIdentifier, RELAY_PROTOCOL } from '@ferry/core';
import { claimBatchSql } from '@ferry/relay';
import { laneCursors, markPublishedSql } from '@ferry/relay/testing';
import { createTestDatabase } from '@ferry/testkit';
import pg from 'pg';
import { declareFlags, isQuick, numArg } from '../lib/args.js';
import { generateRows, outboxTables } from '../lib/outbox.js';
import { cpuSecondsOf } from '../lib/proc.js';
import { printTable, summarize, writeResult } from '../lib/stats.js';

declareFlags(
  'node bench/dist/scenarios/drain-pg-cost.js',
  "PostgreSQL CPU per drained event, the relay's claim and mark apart (no NATS; not part of npm run bench).",
  {
    quick: 'a small run (2,000 events, 1 trial), written to bench/results/quick/',
    events: '<n> events per trial (default 20000)',
    keys: '<n> keys they spread over (default 1000)',
    trials: '<n> trials, each a fresh backlog (default 5)',
    'mark-batch': '<n> rows per mark statement (default 100)',
  },
);

const EVENTS = numArg('events', isQuick() ? 2000 : 20_000);
const KEYS = numArg('keys', 1000);
const TRIALS = numArg('trials', isQuick() ? 1 : 5);
const MARK_BATCH = numArg('mark-batch', 100);
const LANES = 16;
const INSTANCE = 'bench-pg-cost';
const DESIGNS = ['row (before 000015)', 'row, HOT', 'narrow pending table', 'lane cursor'] as const;

/** CPU (utime + stime) of a local PostgreSQL backend, ms. */
function cpuMs(pid: number): number {
  const seconds = cpuSecondsOf(pid);
  if (seconds === undefined) throw new Error(`backend ${pid} is not a process of this host: run the benchmark beside its PostgreSQL`);
  return seconds * 1000;
}

async function backend(url: string): Promise<{ c: pg.Client; pid: number }> {
  const c = new pg.Client({ connectionString: url, application_name: 'bench-pg-cost' });
  await c.connect();
  const pid = (await c.query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0]?.p ?? 0;
  return { c, pid };
}

interface Row {
  seq: string;
  lane: number;
  key: string;
  walk_step: number;
}

const db = await createTestDatabase({ prefix: 'bench_pgcost', lanes: LANES });
const s = quoteIdentifier(db.schema);
const claimer = await backend(db.url);
const marker = await backend(db.url);
try {
  await db.pool.query(
    `INSERT INTO ${s}.relay_instances (instance, application_name, backend_pid, seen_at, expires_at, release, protocol)
     VALUES ($1, 'bench', pg_backend_pid(), now(), now() + interval '1 day', 'bench', $2)`,
    [INSTANCE, RELAY_PROTOCOL],
  );
  await db.pool.query(`UPDATE ${s}.relay_leases SET owner = $1, epoch = 1, renewed_at = now(), expires_at = now() + interval '1 day'`, [
    INSTANCE,
  ]);
  const claim = { name: 'claim', text: claimBatchSql(s) };
  const mark = { name: 'mark', text: markPublishedSql(s) };
  const claimMs: number[] = [];
  const markMs: number[] = [];
  const claims: number[] = [];
  for (let t = 0; t < TRIALS; t++) {
    await generateRows(db.pool, db.schema, { count: EVENTS, keys: KEYS, keyPrefix: `t${t}-`, subject: 'bench.pgcost' });
    await db.pool.query(`VACUUM ANALYZE ${outboxTables(s)}`);
    const cursors = new Map<number, string>();
    const groups = [
      [0, 2, 4, 6, 8, 10, 12, 14],
      [1, 3, 5, 7, 9, 11, 13, 15],
    ];
    let drained = 0;
    let n = 0;
    let claimCpu = 0;
    let markCpu = 0;
    while (drained < EVENTS) {
      let found = 0;
      for (const lanes of groups) {
        const c0 = cpuMs(claimer.pid);
        const { rows } = await claimer.c.query<Row>({
          ...claim,
          values: [lanes, lanes.map((l) => cursors.get(l) ?? ''), [], 500, 2500, 1_048_576, 64 * 1_048_576, INSTANCE],
        });
        claimCpu += cpuMs(claimer.pid) - c0;
        n++;
        found += rows.length;
        for (const [lane, key] of laneCursors(rows)) cursors.set(lane, key); // as the relay does
        const m0 = cpuMs(marker.pid);
        for (let i = 0; i < rows.length; i += MARK_BATCH) {
          const part = rows.slice(i, i + MARK_BATCH);
          await marker.c.query({
            ...mark,
            values: [part.map((r) => r.seq), part.map(() => 1), INSTANCE, part.map((r) => r.lane)],
          });
        }
        markCpu += cpuMs(marker.pid) - m0;
      }
      drained += found;
      if (found === 0) throw new Error(`the claim found nothing with ${EVENTS - drained} rows left`);
    }
    claimMs.push((claimCpu * 1000) / EVENTS);
    markMs.push((markCpu * 1000) / EVENTS);
    claims.push(n);
    console.log(
      `trial ${t + 1}: claim ${((claimCpu * 1000) / EVENTS).toFixed(1)} µs/event over ${n} claims, mark ${((markCpu * 1000) / EVENTS).toFixed(1)} µs/event`,
    );
  }
  const claimS = summarize(claimMs);
  const markS = summarize(markMs);
  printTable(
    `The relay's statements: PostgreSQL CPU per drained event, ${EVENTS} events over ${KEYS} keys, ${TRIALS} trials`,
    ['statement', 'µs per event (median)', 'min', 'max'],
    [
      ['claim', claimS.median.toFixed(1), claimS.min.toFixed(1), claimS.max.toFixed(1)],
      [`mark (${MARK_BATCH} rows a statement)`, markS.median.toFixed(1), markS.min.toFixed(1), markS.max.toFixed(1)],
    ],
  );

  const designs = await measureDesigns(db.pool, claimer, db.schema);
  printTable(
    `Marks of other data models: PostgreSQL CPU per event, ${EVENTS} events over ${KEYS} keys, ${TRIALS} trials`,
    ['design', 'mark µs per event (median)', 'min', 'max', 'claim µs per event (median)', 'insert µs per event (median)'],
    DESIGNS.map((d) => {
      const m = summarize(designs.mark[d] ?? []);
      const c = designs.claim[d];
      const i = summarize(designs.insert[d] ?? []);
      return [d, m.median.toFixed(1), m.min.toFixed(1), m.max.toFixed(1), c ? summarize(c).median.toFixed(1) : '-', i.median.toFixed(1)];
    }),
  );
  writeResult('drain-pg-cost', {
    params: { events: EVENTS, keys: KEYS, trials: TRIALS, markBatch: MARK_BATCH, lanes: LANES },
    relay: { claimUs: claimS, markUs: markS, claims },
    designs: {
      markUs: Object.fromEntries(DESIGNS.map((d) => [d, summarize(designs.mark[d] ?? [])])),
      claimUs: Object.fromEntries(Object.entries(designs.claim).map(([d, v]) => [d, summarize(v)])),
      insertUs: Object.fromEntries(DESIGNS.map((d) => [d, summarize(designs.insert[d] ?? [])])),
    },
  });
} finally {
  await claimer.c.end();
  await marker.c.end();
  await db.close();
}

type Design = (typeof DESIGNS)[number];

function record(into: Partial<Record<Design, number[]>>, d: Design, value: number): void {
  const list = into[d] ?? [];
  list.push(value);
  into[d] = list;
}

/** The outbox's columns before outbox migration 000015, without its indexes: each design adds its own. */
function tableSql(table: string, fillfactor: number): string {
  return `CREATE TABLE ${table} (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, id uuid NOT NULL UNIQUE, key text NOT NULL, version bigint NOT NULL,
  lane smallint NOT NULL, subject text NOT NULL, type text NOT NULL, source text NOT NULL, content_type text NOT NULL,
  data bytea NOT NULL, headers jsonb NOT NULL DEFAULT '{}', occurred_at timestamptz NOT NULL, created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  attempts integer NOT NULL DEFAULT 0, next_attempt_at timestamptz NOT NULL DEFAULT '-infinity', last_error text,
  published_at timestamptz, dead_at timestamptz, UNIQUE (key, version)) WITH (fillfactor = ${fillfactor})`;
}

function designSql(d: Design, t: string, p: string, cur: string): string[] {
  switch (d) {
    case 'row (before 000015)':
      return [
        tableSql(t, 90),
        `CREATE INDEX ON ${t} (lane, key COLLATE "C", seq) WHERE published_at IS NULL`,
        `CREATE INDEX ON ${t} (published_at) WHERE published_at IS NOT NULL`,
        `CREATE INDEX ON ${t} (key, seq) INCLUDE (lane, dead_at) WHERE published_at IS NULL AND attempts > 0`,
      ];
    case 'row, HOT':
      return [tableSql(t, 70)];
    case 'narrow pending table':
      return [
        tableSql(t, 90),
        `CREATE TABLE ${p} (seq bigint PRIMARY KEY, lane smallint NOT NULL, key text COLLATE "C" NOT NULL)`,
        `CREATE INDEX ON ${p} (lane, key, seq)`,
      ];
    case 'lane cursor':
      return [
        tableSql(t, 100),
        `CREATE INDEX ON ${t} (lane, seq)`,
        `CREATE TABLE ${cur} (lane smallint PRIMARY KEY, upto bigint NOT NULL) WITH (fillfactor = 50)`,
        `INSERT INTO ${cur} SELECT generate_series(0, ${LANES - 1}), 0`,
      ];
  }
}

/** Each design's mark (and the lane cursor's claim) over a fresh table per trial, designs interleaved. */
async function measureDesigns(pool: pg.Pool, conn: { c: pg.Client; pid: number }, schema: string) {
  const s = quoteIdentifier(schema);
  const t = `${s}.design_events`;
  const p = `${s}.design_pending`;
  const cur = `${s}.design_cursors`;
  const mark: Partial<Record<Design, number[]>> = {};
  const claim: Partial<Record<Design, number[]>> = {};
  const insert: Partial<Record<Design, number[]>> = {};
  for (let trial = 0; trial < TRIALS; trial++) {
    const order = trial % 2 === 0 ? DESIGNS : [...DESIGNS].reverse();
    for (const d of order) {
      await pool.query(`DROP TABLE IF EXISTS ${t}, ${p}, ${cur}`);
      for (const sql of designSql(d, t, p, cur)) await pool.query(sql);
      // The rows' insert, on the measured connection: what each design's indexes (and the narrow table's
      // second row) cost the publish, in one statement of 20,000 rows (no function, no key_versions).
      const i0 = cpuMs(conn.pid);
      await conn.c.query(
        `INSERT INTO ${t} (id, key, version, lane, subject, type, source, content_type, data, occurred_at)
         SELECT gen_random_uuid(), 'k' || (g % $2), g / $2 + 1, (g % $2) % ${LANES}, 'bench.pgcost', 'OrderPlaced', 'bench', 'application/json',
                convert_to(json_build_object('order', g, 'note', repeat('x', 150))::text, 'UTF8'), now()
           FROM generate_series(0, $1::int - 1) AS g`,
        [EVENTS, KEYS],
      );
      if (d === 'narrow pending table') await conn.c.query(`INSERT INTO ${p} SELECT seq, lane, key FROM ${t}`);
      record(insert, d, ((cpuMs(conn.pid) - i0) * 1000) / EVENTS);
      await pool.query(`VACUUM ANALYZE ${t}`);
      if (d === 'narrow pending table') await pool.query(`VACUUM ANALYZE ${p}`);
      const rows = (await pool.query<{ seq: string; lane: number; key: string }>(`SELECT seq::text, lane, key FROM ${t} ORDER BY seq`))
        .rows;
      await conn.c.query(`SELECT count(*) FROM ${t}`); // hint bits set, as a claim would have
      let claimCpu = 0;
      if (d === 'lane cursor') {
        // The claim: each lane's next rows after its cursor, every column, as the relay loads them,
        // 2,500 rows a claim (the relay's room with its defaults), until the log is read.
        const upto = Array.from({ length: LANES }, () => '0');
        const per = Math.ceil(2500 / LANES);
        const c0 = cpuMs(conn.pid);
        for (let read = 0; read < EVENTS; ) {
          const got = await conn.c.query<{ seq: string; lane: number }>(
            `SELECT r.seq::text AS seq, r.id::text AS id, r.key, r.version::text AS version, r.lane, r.subject, r.type, r.source,
                    r.content_type, r.data, r.headers, r.occurred_at, r.created_at, r.attempts
               FROM unnest($1::smallint[], $2::bigint[]) AS c(lane, upto)
              CROSS JOIN LATERAL (SELECT * FROM ${t} o WHERE o.lane = c.lane AND o.seq > c.upto ORDER BY o.seq LIMIT $3) r`,
            [Array.from({ length: LANES }, (_, l) => l), upto, per],
          );
          if (got.rows.length === 0) throw new Error('the lane cursor claim found nothing');
          for (const r of got.rows) if (BigInt(r.seq) > BigInt(upto[r.lane] ?? '0')) upto[r.lane] = r.seq;
          read += got.rows.length;
        }
        claimCpu = ((cpuMs(conn.pid) - c0) * 1000) / EVENTS;
        record(claim, d, claimCpu);
      }
      const c0 = cpuMs(conn.pid);
      for (let i = 0; i < rows.length; i += MARK_BATCH) {
        const part = rows.slice(i, i + MARK_BATCH);
        if (d === 'narrow pending table') {
          await conn.c.query(`DELETE FROM ${p} WHERE seq = ANY ($1::bigint[])`, [part.map((r) => r.seq)]);
        } else if (d === 'lane cursor') {
          await conn.c.query(
            `UPDATE ${cur} c SET upto = m.upto FROM (SELECT lane, max(seq) AS upto FROM unnest($1::smallint[], $2::bigint[]) AS a(lane, seq) GROUP BY lane) m
              WHERE c.lane = m.lane AND c.upto < m.upto`,
            [part.map((r) => r.lane), part.map((r) => r.seq)],
          );
        } else {
          await conn.c.query(`UPDATE ${t} SET published_at = now() WHERE seq = ANY ($1::bigint[]) AND published_at IS NULL`, [
            part.map((r) => r.seq),
          ]);
        }
      }
      record(mark, d, ((cpuMs(conn.pid) - c0) * 1000) / EVENTS);
    }
  }
  await pool.query(`DROP TABLE IF EXISTS ${t}, ${p}, ${cur}`);
  return { mark, claim, insert };
}
