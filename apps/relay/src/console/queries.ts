import { quoteIdentifier } from '@ferry/core';
import { type ParkedEvent, type ParkedJobData, parkedEventOf, readParkedJob } from '@ferry/inbox';
import type pg from 'pg';
import { type EventFilter, filterCondition, type OutboxRowHead, REASON_CHARS, STATE_SQL } from '../actions/event-filter.js';
import { outboxWithState, waitingBehind } from '../sql/outbox-state.js';

// The console's own reads. Each is bounded: a LIMIT, an index (id, (key, version), the failed-row
// and pending-key indexes, pg-boss's queue name), and the pool's statement_timeout.

export interface EventRow extends OutboxRowHead {
  state: string;
  attempts: number;
  created_at: Date;
  published_at: Date | null;
  last_error: string | null;
}

const EVENT_COLUMNS = `o.seq::text AS seq, o.id::text AS id, o.key, o.version::text AS version, o.subject, o.type, ${STATE_SQL} AS state,
  coalesce(p.attempts, d.attempts, 0) AS attempts, o.created_at, d.published_at, coalesce(p.last_error, d.last_error) AS last_error`;

/** A dead or backing-off search looks at the newest `limit × FAILED_SCAN` failed rows (the page says so when it fills). */
export const FAILED_SCAN = 10;

/** Newest first, at most `limit`. */
export async function searchEvents(pool: pg.Pool, schema: string, f: EventFilter, limit: number): Promise<EventRow[]> {
  const s = quoteIdentifier(schema);
  const { sql, params } = filterCondition(f);
  if (f.state === 'dead' || f.state === 'backing-off') {
    // Failed rows are few and have an index of their own (outbox_pending_failed_idx): the newest of them
    // from the index alone, then the filter on those rows, instead of a walk back through every newer row.
    const { rows } = await pool.query<EventRow>(
      `WITH f AS (SELECT p.seq FROM ${s}.outbox_pending p WHERE p.attempts > 0 ORDER BY p.seq + 0 DESC LIMIT ${Math.trunc(limit) * FAILED_SCAN})
       SELECT ${EVENT_COLUMNS} FROM f JOIN ${outboxWithState(s)} ON o.seq = f.seq WHERE ${sql} ORDER BY o.seq DESC LIMIT ${Math.trunc(limit)}`,
      params,
    );
    return rows;
  }
  const { rows } = await pool.query<EventRow>(
    `SELECT ${EVENT_COLUMNS} FROM ${outboxWithState(s)} WHERE ${sql} ORDER BY o.seq DESC LIMIT ${Math.trunc(limit)}`,
    params,
  );
  return rows;
}

/** The key's versions around `version` (the unique (key, version) index). */
export async function keyHistory(pool: pg.Pool, schema: string, key: string, version: string, around = 10): Promise<EventRow[]> {
  const s = quoteIdentifier(schema);
  const { rows } = await pool.query<EventRow>(
    `SELECT ${EVENT_COLUMNS} FROM ${outboxWithState(s)} WHERE o.key = $1 AND o.version BETWEEN $2::bigint - $3 AND $2::bigint + $3 ORDER BY o.version`,
    [key, version, around],
  );
  // A pending row behind the key's failed head is not merely pending: only the head is ever sent, so it
  // waits for an operator (or the head's next attempt). The head is the key's oldest pending row.
  const head = await pool.query<{ seq: string; version: string; dead: boolean; failed: boolean }>(
    `SELECT p.seq::text AS seq, o.version::text AS version, p.dead_at IS NOT NULL AS dead, p.attempts > 0 AS failed
       FROM ${s}.outbox_pending p JOIN ${s}.outbox o ON o.seq = p.seq
      WHERE p.key = $1 ORDER BY p.seq LIMIT 1`,
    [key],
  );
  const h = head.rows[0];
  if (!h?.failed) return rows;
  return rows.map((r) =>
    r.state === 'pending' && BigInt(r.seq) > BigInt(h.seq)
      ? { ...r, state: `waiting behind v${h.version} (${h.dead ? 'dead' : 'backing off'})` }
      : r,
  );
}

export interface BlockedRow {
  key: string;
  id: string;
  version: string;
  subject: string;
  type: string;
  attempts: number;
  last_error: string | null;
  dead_at: Date | null;
  next_attempt_at: Date;
  waiting: number;
}

/**
 * Keys held behind a failed head, oldest first, with the rows waiting behind each. Only a key's head is
 * ever sent, so every failed row heads its key: the oldest failed rows are the oldest blocked keys, read
 * from outbox_pending_failed_idx (`seq + 0` keeps the planner off a primary-key walk of the pending rows).
 */
export async function blockedKeys(pool: pg.Pool, schema: string, limit: number): Promise<BlockedRow[]> {
  const s = quoteIdentifier(schema);
  // Two steps: the oldest failed seqs from the index alone (no heap), then those rows' details.
  const { rows } = await pool.query<BlockedRow>(
    `WITH f AS (SELECT p.seq FROM ${s}.outbox_pending p WHERE p.attempts > 0 ORDER BY p.seq + 0 LIMIT $1)
     SELECT h.key, o.id::text AS id, o.version::text AS version, o.subject, o.type, h.attempts, h.last_error, h.dead_at, h.next_attempt_at,
            ${waitingBehind(s, 'h')}::int AS waiting
       FROM f JOIN ${s}.outbox_pending h ON h.seq = f.seq JOIN ${s}.outbox o ON o.seq = f.seq
      ORDER BY h.seq`,
    [limit],
  );
  return rows;
}

/** pg-boss's job table of the inbox's parking lot, or null when that schema has none. */
export async function bossJobTable(pool: pg.Pool, bossSchema: string): Promise<string | null> {
  const table = `${quoteIdentifier(bossSchema)}.job`;
  const { rows } = await pool.query<{ t: string | null }>('SELECT to_regclass($1)::text AS t', [table]);
  return rows[0]?.t ? table : null;
}

const LIVE = `('created', 'retry', 'active', 'failed')`;
const PARK_QUEUE = /^ferry\.inbox\.([a-z_][a-z0-9_]{0,62})\.parked$/;

export interface ParkedCount {
  consumer: string;
  live: number;
  /** Failed: holding its key until retried or discarded. */
  failed: number;
}

export async function parkedCounts(pool: pg.Pool, jobTable: string): Promise<ParkedCount[]> {
  const { rows } = await pool.query<{ name: string; live: number; failed: number }>(
    `SELECT name, count(*)::int AS live, (count(*) FILTER (WHERE state = 'failed'))::int AS failed
       FROM ${jobTable} WHERE name LIKE 'ferry.inbox.%.parked' AND state IN ${LIVE} GROUP BY name ORDER BY name LIMIT 200`,
  );
  return rows.flatMap((r) => {
    const consumer = PARK_QUEUE.exec(r.name)?.[1];
    return consumer ? [{ consumer, live: r.live, failed: r.failed }] : [];
  });
}

/** A parked event as the inbox's list shows it, and what the console shows beside: the message as parked. */
export interface ParkedRow extends ParkedEvent {
  mode: string | null;
  subject: string | null;
  headers: ReadonlyArray<readonly [string, string]>;
  body: Buffer;
}

/** A consumer's parked events not yet applied or discarded, oldest first; `ids` or `key` narrow them. */
export async function parkedEvents(
  pool: pg.Pool,
  jobTable: string,
  consumer: string,
  limit: number,
  narrow: { ids?: string[]; key?: string; failedOnly?: boolean } = {},
): Promise<ParkedRow[]> {
  const params: unknown[] = [`ferry.inbox.${consumer}.parked`];
  let where = `name = $1 AND state IN ${LIVE}`;
  if (narrow.ids) {
    params.push(narrow.ids);
    where += ` AND id = ANY ($${params.length}::uuid[])`;
  }
  if (narrow.key !== undefined) {
    params.push(narrow.key);
    where += ` AND data->>'key' = $${params.length}`;
  }
  if (narrow.failedOnly) where += ` AND state = 'failed'`;
  const { rows } = await pool.query<{ id: string; state: string; data: unknown; output: unknown; retry_count: number; created_on: Date }>(
    `SELECT id::text AS id, state::text AS state, data, output, retry_count, created_on FROM ${jobTable}
      WHERE ${where} ORDER BY created_on, id LIMIT ${Math.trunc(limit)}`,
    params,
  );
  return rows.map((r) => {
    // The inbox's one decoder: total, so one job another role wrote cannot break the page.
    const read = readParkedJob(r.data);
    const d: Partial<ParkedJobData> = read.kind === 'parked' ? read.job : {};
    const job = { id: r.id, state: r.state, data: r.data, output: r.output, retryCount: r.retry_count, createdOn: r.created_on };
    return {
      ...parkedEventOf(consumer, job, read),
      mode: d.mode ?? null,
      subject: d.natsSubject ?? null,
      headers: d.headers ?? [],
      body: d.body !== undefined ? Buffer.from(d.body, 'base64') : Buffer.alloc(0),
    };
  });
}

export interface VersionRow {
  consumer: string;
  key: string;
  version: string;
  applied_at: Date;
  parked: number | null;
  skipped: string[] | null;
}

/** What inbox_versions recorded for a key (every consumer, or one: the primary key). */
export async function inboxVersions(pool: pg.Pool, schema: string, key: string, consumer?: string): Promise<VersionRow[] | null> {
  const s = quoteIdentifier(schema);
  const t = await pool.query<{ t: string | null }>('SELECT to_regclass($1)::text AS t', [`${s}.inbox_versions`]);
  if (!t.rows[0]?.t) return null;
  const { rows } = await pool.query<VersionRow>(
    `SELECT consumer, key, version::text AS version, applied_at, to_jsonb(v)->'parked' AS parked,
            (SELECT array_agg(x::text) FROM jsonb_array_elements_text(to_jsonb(v)->'skipped') x) AS skipped
       FROM ${s}.inbox_versions v WHERE key = $1 ${consumer ? 'AND consumer = $2' : ''} ORDER BY consumer LIMIT 100`,
    consumer ? [key, consumer] : [key],
  );
  return rows;
}

/** One minute of the overview's charts. */
export interface MinuteStat {
  /** The minute's start, ms since the epoch. */
  minute: number;
  /** Events marked published in that minute (discarded ones not counted). */
  published: number;
  /** Insert → published latency of those events, in ms (the outbox's created_at to published_at). */
  p50Ms: number | null;
  p99Ms: number | null;
}

/**
 * Events published per minute in [from, to), with the median and 99th
 * percentile of their insert → published time: a range of the
 * published rows' published_at index, read for each minute once (the console keeps the
 * finished minutes).
 */
export async function publishedPerMinute(pool: pg.Pool, schema: string, from: Date, to: Date): Promise<MinuteStat[]> {
  const s = quoteIdentifier(schema);
  const { rows } = await pool.query<{ minute: Date; published: number; p: Array<number | string> | null }>(
    `SELECT date_trunc('minute', d.published_at) AS minute, count(*)::int AS published,
            percentile_disc(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM d.published_at - o.created_at) * 1000) AS p
       FROM ${s}.outbox_published d JOIN ${s}.outbox o ON o.seq = d.seq
      WHERE d.published_at >= $1 AND d.published_at < $2 AND d.dead_at IS NULL
      GROUP BY 1 ORDER BY 1`,
    [from, to],
  );
  return rows.map((r) => ({
    minute: r.minute.getTime(),
    published: r.published,
    p50Ms: r.p?.[0] == null ? null : Math.max(0, Number(r.p[0])),
    p99Ms: r.p?.[1] == null ? null : Math.max(0, Number(r.p[1])),
  }));
}

/** Failed heads with the same reason: ServicePulse's "grouped by cause". */
export interface FailureGroup {
  state: 'dead' | 'backing-off';
  /** last_error's first REASON_CHARS characters. */
  reason: string;
  /** Failed rows, one per blocked key (only a key's head is ever sent). */
  keys: number;
  oldest: Date;
}

/** Failed rows the grouping reads at most: the oldest ones (the page says so when there are more). */
export const GROUPED_ROWS = 10_000;

/**
 * The oldest GROUPED_ROWS failed rows grouped by state and reason, largest groups first: their seqs
 * from the failed-row index alone, then those rows. Bounded, so a hundred thousand dead rows cost
 * what ten thousand do; a group's action previews its exact count over every failed row.
 */
export async function failureGroups(pool: pg.Pool, schema: string, limit: number): Promise<{ groups: FailureGroup[]; grouped: number }> {
  const s = quoteIdentifier(schema);
  const { rows } = await pool.query<FailureGroup & { grouped: number }>(
    `WITH f AS (SELECT p.seq FROM ${s}.outbox_pending p WHERE p.attempts > 0 ORDER BY p.seq + 0 LIMIT ${GROUPED_ROWS}),
          g AS (SELECT CASE WHEN p.dead_at IS NULL THEN 'backing-off' ELSE 'dead' END AS state,
                       coalesce(left(p.last_error, ${REASON_CHARS}), '') AS reason, count(*)::int AS keys, min(o.created_at) AS oldest
                  FROM f JOIN ${s}.outbox_pending p ON p.seq = f.seq JOIN ${s}.outbox o ON o.seq = f.seq GROUP BY 1, 2)
     SELECT g.*, (SELECT sum(keys) FROM g)::int AS grouped FROM g ORDER BY keys DESC, oldest LIMIT ${Math.trunc(limit)}`,
  );
  return { groups: rows.map(({ grouped: _, ...g }) => g), grouped: rows[0]?.grouped ?? 0 };
}
