/**
 * Backlogs and drains shared by the relay scenarios: outbox rows generated in
 * SQL, the raw JetStream baseline, and a relay draining a backlog.
 */
import { encodeEvent, eventFromOutboxRow, notifyChannel, type OutboxEventRow, quoteIdentifier } from '@ferry/core';
import { createRelay, type RelayOptions } from '@ferry/relay';
import { createTestStream, natsUrl, type TestDatabase } from '@ferry/testkit';
import { jetstream } from '@nats-io/jetstream';
import { headers, type NatsConnection } from '@nats-io/transport-node';
import type pg from 'pg';
import { until } from './args.js';

/** Characters of filler in every generated payload, to make it about 200 bytes (what the figures use). */
const NOTE_CHARS = 100;

/** The JSON payload every generated event carries (about 200 bytes), built in SQL; `makeRows` builds the same bytes. */
const PAYLOAD_SQL = `convert_to(json_build_object('order', g, 'amount', 4200, 'currency', 'EUR',
  'lines', json_build_array(json_build_object('sku', 'A-1', 'qty', 2)), 'note', repeat('x', ${NOTE_CHARS}))::text, 'UTF8')`;

export interface GenerateOptions {
  /** Rows to insert. */
  count: number;
  /** Distinct keys the rows spread over (versions 1, 2, … per key). */
  keys: number;
  /** Key prefix; distinct per backlog so (key, version) stays unique. */
  keyPrefix: string;
  subject: string;
  /** Insert the rows as already published this long ago (retained history), or pending when undefined. */
  publishedAgoMs?: number;
}

/**
 * The statements that write the rows as the publisher would have: one INSERT …
 * SELECT generate_series (the outbox's trigger makes each row pending, outbox
 * migration 000015), and with `publishedAgoMs` a second one that moves them
 * to published: deletes the pending rows this transaction inserted and
 * records each in outbox_published. Two statements: the trigger fires at the
 * end of the INSERT's statement, so inside it (a data-modifying CTE) there is
 * no pending row to move yet. Run them in one transaction (`generateRows`,
 * `commitBacklog`): the move finds the rows by the transaction that wrote them.
 */
export function generateRowsSql(schema: string, o: GenerateOptions, from = 0): Array<{ text: string; values: unknown[] }> {
  const s = quoteIdentifier(schema);
  const insert = {
    text: `INSERT INTO ${s}.outbox (id, key, version, subject, type, source, content_type, data, occurred_at)
      SELECT gen_random_uuid(), $1 || (g % $2), g / $2 + 1, $3, 'OrderPlaced', 'bench', 'application/json', ${PAYLOAD_SQL}, now()
        FROM generate_series($4::bigint, $4::bigint + $5 - 1) AS g`,
    values: [o.keyPrefix, o.keys, o.subject, from, o.count],
  };
  if (o.publishedAgoMs === undefined) return [insert];
  return [
    insert,
    {
      text: publishPendingSql(s, 'p.xmin = pg_current_xact_id()::xid', 'now() - make_interval(secs => $1::double precision / 1000)'),
      values: [o.publishedAgoMs],
    },
  ];
}

/**
 * Marks pending rows published as the relay's mark does (outbox migration
 * 000015): deletes the pending rows (alias `p`) that `where` selects and
 * records each in outbox_published at `at` (an expression that may use the
 * row's `seq`). The row count is the rows marked.
 */
export function publishPendingSql(schemaSql: string, where = 'true', at = 'now()'): string {
  return `WITH gone AS (DELETE FROM ${schemaSql}.outbox_pending p WHERE ${where} RETURNING p.seq)
INSERT INTO ${schemaSql}.outbox_published (seq, published_at) SELECT seq, ${at} FROM gone`;
}

/** The outbox and its delivery-state tables (outbox migration 000015), for VACUUM and ANALYZE. */
export function outboxTables(schemaSql: string): string {
  return `${schemaSql}.outbox, ${schemaSql}.outbox_pending, ${schemaSql}.outbox_published`;
}

/** Runs `generateRowsSql`'s statements on `c` (in its transaction); throws unless each wrote every row. */
async function runGenerated(c: pg.PoolClient, schema: string, o: GenerateOptions, from: number): Promise<void> {
  for (const q of generateRowsSql(schema, o, from)) {
    const r = await c.query(q.text, q.values);
    if (r.rowCount !== o.count) throw new Error(`generateRows: a statement wrote ${r.rowCount} rows, expected ${o.count}`);
  }
}

/**
 * Inserts `count` rows numbered from `startAt` in chunks of `chunk` (one
 * transaction each), `parallel` chunks at a time (disjoint numbers, so no
 * unique conflicts).
 */
export async function generateRows(
  pool: pg.Pool,
  schema: string,
  o: GenerateOptions,
  startAt = 0,
  chunk = 250_000,
  parallel = 2,
): Promise<void> {
  let next = 0;
  const worker = async () => {
    for (let from = next; from < o.count; from = next) {
      next += chunk;
      const part = { ...o, count: Math.min(chunk, o.count - from) };
      const c = await pool.connect();
      try {
        await c.query('BEGIN');
        await runGenerated(c, schema, part, startAt + from);
        await c.query('COMMIT');
      } catch (err) {
        await c.query('ROLLBACK').catch(() => {});
        throw err;
      } finally {
        c.release();
      }
    }
  };
  await Promise.all(Array.from({ length: parallel }, worker));
}

/**
 * Inserts a pending backlog in one transaction that also NOTIFYs the relay
 * channel, and returns `performance.now()` right after COMMIT: the relay can
 * see none of it before then.
 */
export async function commitBacklog(pool: pg.Pool, schema: string, o: GenerateOptions): Promise<number> {
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    await runGenerated(c, schema, o, 0);
    await c.query('SELECT pg_notify($1, $2)', [notifyChannel(schema), 'bench']);
    await c.query('COMMIT');
    return performance.now();
  } finally {
    c.release();
  }
}

export type RowForRaw = OutboxEventRow;

/** The rows `generateRowsSql` writes, built in memory for the raw baseline (same sizes, same headers). */
export function makeRows(o: GenerateOptions): RowForRaw[] {
  const now = new Date();
  return Array.from({ length: o.count }, (_, g) => ({
    id: crypto.randomUUID(),
    key: `${o.keyPrefix}${g % o.keys}`,
    version: String(Math.floor(g / o.keys) + 1),
    subject: o.subject,
    type: 'OrderPlaced',
    source: 'bench',
    content_type: 'application/json',
    data: Buffer.from(
      `{"order" : ${g}, "amount" : 4200, "currency" : "EUR", "lines" : [{"sku" : "A-1", "qty" : 2}], "note" : "${'x'.repeat(NOTE_CHARS)}"}`,
    ),
    headers: null,
    occurred_at: now,
  }));
}

/**
 * The ceiling: the same messages encoded the same way (CloudEvents headers,
 * Nats-Msg-Id) and published pipelined from one connection with at most
 * `window` PubAcks outstanding. Returns messages per second.
 */
export async function rawPublish(nc: NatsConnection, rows: RowForRaw[], window: number): Promise<number> {
  const js = jetstream(nc);
  let next = 0;
  const started = performance.now();
  const worker = async () => {
    while (next < rows.length) {
      const r = rows[next++];
      if (!r) break;
      const enc = encodeEvent(eventFromOutboxRow(r));
      const h = headers();
      for (const [k, v] of enc.headers) h.append(k, v); // as the relay builds them
      await js.publish(enc.subject, enc.body, { headers: h });
    }
  };
  await Promise.all(Array.from({ length: Math.min(window, rows.length) }, worker));
  return rows.length / ((performance.now() - started) / 1000);
}

/** A started relay and a counter of the rows it marked published. */
export async function startRelay(options: RelayOptions): Promise<{
  relay: ReturnType<typeof createRelay>;
  marked: () => number;
}> {
  let marked = 0;
  const relay = createRelay({ maintenance: false, ...options });
  relay.on('relay:batch:published', (e) => {
    marked += e.published;
  });
  await relay.start();
  await until(() => relay.ready() && relay.lanes.length > 0, 'the relay to lease its lanes', 30_000);
  return { relay, marked: () => marked };
}

/**
 * Drains a backlog of `count` rows with a relay started before the backlog is
 * committed: events per second from COMMIT to the last batch marked published.
 */
export async function relayDrain(pool: pg.Pool, schema: string, relayOptions: RelayOptions, backlog: GenerateOptions): Promise<number> {
  const { relay, marked } = await startRelay({ listen: true, ...relayOptions });
  try {
    const before = marked();
    const t0 = await commitBacklog(pool, schema, backlog);
    await until(() => marked() - before >= backlog.count, `the relay to mark ${backlog.count} rows`);
    return backlog.count / ((performance.now() - t0) / 1000);
  } finally {
    await relay.stop();
  }
}

/**
 * `relayDrain` of a backlog on `<stream>.orders` of a file stream of its own, named from
 * `streamPrefix` and removed after: events per second, with the relay's defaults.
 */
export async function relayDrainFreshStream(
  db: TestDatabase,
  streamPrefix: string,
  backlog: Omit<GenerateOptions, 'subject'>,
): Promise<number> {
  const stream = await createTestStream({ prefix: streamPrefix, storage: 'file' });
  try {
    return await relayDrain(
      db.pool,
      db.schema,
      { databaseUrl: db.url, schema: db.schema, nats: { servers: natsUrl() } },
      { ...backlog, subject: `${stream.prefix}.orders` },
    );
  } finally {
    await stream.close();
  }
}
