import type { Queryable } from '@ferry/core';
import pg from 'pg';

// The gate's hot path in as few round trips as possible: BEGIN travels with the
// gate, as multi-statement simple queries. Simple queries take no parameters, so the values are inlined as SQL
// literals escaped by `literal()`; the schema is the pre-quoted identifier.

/** A string as a SQL literal, escaped by node-postgres's `escapeLiteral` (libpq's PQescapeLiteral rules). */
export function literal(value: string): string {
  if (value.includes('\u0000')) throw new RangeError('a PostgreSQL text value cannot contain a NUL character');
  return pg.escapeLiteral(value);
}

function lastRows<R>(result: unknown): R[] {
  const results = Array.isArray(result) ? result : [result];
  const last = results.at(-1) as { rows?: R[] } | undefined;
  return last?.rows ?? [];
}

/**
 * `sequential`: record `v`, then move over versions an operator discarded
 * while an earlier one was missing (inbox migration 000003); the array is
 * empty for nearly every key, and then this costs one comparison.
 */
function advance(schema: string, v: string): string {
  const t = `${schema}.inbox_versions`;
  const next = `${schema}.inbox_next_version(${v}, ${t}.skipped)`;
  return (
    `version = CASE WHEN ${t}.skipped = '{}' THEN ${v} ELSE ${next} END, ` +
    `skipped = CASE WHEN ${t}.skipped = '{}' THEN ${t}.skipped ELSE ARRAY(SELECT x FROM unnest(${t}.skipped) AS x WHERE x > ${next}) END`
  );
}

/**
 * BEGIN and the version gate as one conditional write, in one round trip: the
 * statement that decides whether the event is new also records its version
 * and takes the row lock, so an applied event writes its version row once and
 * a stale or duplicate one writes nothing (and its transaction ends without a
 * WAL flush).
 *
 * - `latest`: upsert the version where the recorded one is older. A key's
 *   first version is an insert: a second process inserting the same key waits
 *   on the primary key until the first commits, then re-checks, so even
 *   version 1 is serialised across processes. The `NOT EXISTS` pre-check
 *   keeps an already-stale event from locking the row.
 * - `sequential`: only recorded + 1, and (from the stream) only while the key
 *   has no parked events.
 * - A row held by another transaction makes the statement wait; PostgreSQL
 *   then re-checks the condition on the committed row (READ COMMITTED).
 *
 * Resolves `true` when this transaction recorded the event's version and holds
 * the row lock (run the handler, then COMMIT); otherwise read the row with
 * `readKeyRow`.
 */
export async function beginGate(
  tx: Queryable,
  schema: string,
  consumer: string,
  key: string,
  version: bigint,
  rule: { sequential: boolean; ignoreParked: boolean },
): Promise<boolean> {
  const t = `${schema}.inbox_versions`;
  const c = literal(consumer);
  const k = literal(key);
  const v = version.toString();
  const row = `consumer = ${c} AND key = ${k}`;
  const parkedOk = rule.ignoreParked ? '' : ` AND ${t}.parked = 0`;
  let gate: string;
  if (!rule.sequential) {
    gate =
      `INSERT INTO ${t} (consumer, key, version) SELECT ${c}, ${k}, ${v} ` +
      `WHERE NOT EXISTS (SELECT 1 FROM ${t} WHERE ${row} AND version >= ${v}) ` +
      `ON CONFLICT (consumer, key) DO UPDATE SET version = excluded.version, applied_at = now() WHERE ${t}.version < excluded.version RETURNING 1 AS won`;
  } else if (version === 1n) {
    gate =
      `INSERT INTO ${t} (consumer, key, version) VALUES (${c}, ${k}, 1) ` +
      `ON CONFLICT (consumer, key) DO UPDATE SET ${advance(schema, '1')}, applied_at = now() WHERE ${t}.version = 0${parkedOk} RETURNING 1 AS won`;
  } else {
    gate = `UPDATE ${t} SET ${advance(schema, v)}, applied_at = now() WHERE ${row} AND version = ${v} - 1${parkedOk} RETURNING 1 AS won`;
  }
  const result = await tx.query(`BEGIN; ${gate}`);
  return lastRows(result).length > 0;
}

/**
 * After a gate that did not pass: the key's recorded version and parked count
 * as now committed (0 and 0 when the key has no row), with ROLLBACK in the
 * same round trip when `thenRollback`.
 */
export async function readKeyRow(
  tx: Queryable,
  schema: string,
  consumer: string,
  key: string,
  thenRollback: boolean,
): Promise<{ version: bigint; parked: number }> {
  const select = `SELECT version::text AS version, parked FROM ${schema}.inbox_versions WHERE consumer = ${literal(consumer)} AND key = ${literal(key)}`;
  const result = await tx.query(thenRollback ? `${select}; ROLLBACK` : select);
  const results = Array.isArray(result) ? result : [result];
  const row = (results[0] as { rows?: Array<{ version: string; parked: number }> } | undefined)?.rows?.[0];
  return { version: row ? BigInt(row.version) : 0n, parked: row?.parked ?? 0 };
}

/** `dedupe`: BEGIN and record the message id; `false` when it was already there. One round trip. */
export async function beginAndRecordMessage(tx: Queryable, schema: string, consumer: string, id: string): Promise<boolean> {
  const result = await tx.query(
    `BEGIN; INSERT INTO ${schema}.inbox_messages (consumer, id) VALUES (${literal(consumer)}, ${literal(id)}) ON CONFLICT DO NOTHING RETURNING 1 AS ok`,
  );
  return lastRows(result).length === 1;
}
