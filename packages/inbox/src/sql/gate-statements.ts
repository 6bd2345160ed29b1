import type { Queryable } from '@ferry/core';
import type { KeyRow } from './lock-key.js';

// The gate's hot path in as few round trips as possible: BEGIN travels with the
// lock, and the version record travels with COMMIT, as multi-statement simple
// queries. Simple queries take no parameters, so the values are inlined as SQL
// literals escaped by `literal()`; the schema is the pre-quoted identifier.

/** A string as a SQL literal, escaped as libpq's PQescapeLiteral (and node-pg's escapeLiteral) do. */
export function literal(value: string): string {
  if (value.includes('\u0000')) throw new RangeError('a PostgreSQL text value cannot contain a NUL character');
  let hasBackslash = false;
  let out = "'";
  for (const c of value) {
    if (c === "'") out += "''";
    else if (c === '\\') {
      out += '\\\\';
      hasBackslash = true;
    } else out += c;
  }
  out += "'";
  return hasBackslash ? ` E${out}` : out;
}

function lastRows<R>(result: unknown): R[] {
  const results = Array.isArray(result) ? result : [result];
  const last = results.at(-1) as { rows?: R[] } | undefined;
  return last?.rows ?? [];
}

/**
 * BEGIN, make sure the `(consumer, key)` row exists, and lock it only if the
 * event is newer than the recorded version: one round trip.
 *
 * - The insert is `ON CONFLICT DO NOTHING`, so a second process inserting the
 *   same new key waits on the unique index until the first commits: even
 *   version 1 of a key is serialised across processes.
 * - The locking read carries `version < $v`: a stale or duplicate event locks
 *   nothing and writes nothing, so its transaction commits without a WAL
 *   flush. If another transaction holds the row, PostgreSQL waits, then
 *   re-checks the condition on the committed row (READ COMMITTED), so the lock
 *   is taken only when the event is still newer.
 * - The last read (a new snapshot) reports the recorded version either way.
 */
export async function beginAndLockKey(
  tx: Queryable,
  schema: string,
  consumer: string,
  key: string,
  version: bigint,
): Promise<KeyRow & { locked: boolean }> {
  const c = literal(consumer);
  const k = literal(key);
  const where = `consumer = ${c} AND key = ${k}`;
  const result = await tx.query(
    `BEGIN; INSERT INTO ${schema}.inbox_versions (consumer, key, version) VALUES (${c}, ${k}, 0) ON CONFLICT DO NOTHING; ` +
      `SELECT 1 AS locked FROM ${schema}.inbox_versions WHERE ${where} AND version < ${version.toString()} FOR UPDATE; ` +
      `SELECT version::text AS version, parked FROM ${schema}.inbox_versions WHERE ${where}`,
  );
  const results = Array.isArray(result) ? result : [result];
  const locked = ((results.at(-2) as { rows?: unknown[] } | undefined)?.rows?.length ?? 0) > 0;
  const row = lastRows<{ version: string; parked: number }>(result)[0];
  if (!row) throw new Error(`inbox_versions row for consumer ${consumer} key ${key} vanished`);
  return { version: BigInt(row.version), parked: row.parked, locked };
}

/** Records the applied version and commits: one round trip. */
export async function recordVersionAndCommit(tx: Queryable, schema: string, consumer: string, key: string, version: bigint): Promise<void> {
  await tx.query(
    `UPDATE ${schema}.inbox_versions SET version = ${version.toString()}, applied_at = now() WHERE consumer = ${literal(consumer)} AND key = ${literal(key)}; COMMIT`,
  );
}

/** `dedupe`: BEGIN and record the message id; `false` when it was already there. One round trip. */
export async function beginAndRecordMessage(tx: Queryable, schema: string, consumer: string, id: string): Promise<boolean> {
  const result = await tx.query(
    `BEGIN; INSERT INTO ${schema}.inbox_messages (consumer, id) VALUES (${literal(consumer)}, ${literal(id)}) ON CONFLICT DO NOTHING RETURNING 1 AS ok`,
  );
  return lastRows(result).length === 1;
}
