import { InternalError, type Queryable } from '@ferry/core';
import type { ParkedJobData } from '../parked-job.js';
import { literal } from './gate-statements.js';

// `sequential` mode: early versions wait in `inbox_early` (migration inbox
// 000003) instead of holding an ack-pending slot on the consumer. The
// statements that change a key's rows run under the key's `inbox_versions`
// row lock (`lockKey` or the gate), which is what keeps "store an early
// version" and "apply its predecessor, then look for it" from missing each
// other across processes.
//
// No statement here adds to a version (issue 43): `recorded + 1` is out of
// bigint range once a key is applied at 2^63-1, and one such expression
// evaluated for a key's row failed every drain of that key for good.
// Subtracting 1 from a version known to be above another cannot underflow,
// and wire versions are 1..2^63-1 (core's codec).

/**
 * After a `sequential` gate that did not pass, in its transaction: takes the
 * key's row lock (creating the row at version 0 for a key never seen), stores
 * the message when it is early (newer than recorded + 1, nothing parked) and
 * COMMITs, all in one round trip. A second copy of a stored version stores
 * nothing and comes back as `copy` (the caller settles it as a duplicate).
 * Returns the key's row as read under the lock.
 */
export async function holdEarlyAndCommit(
  tx: Queryable,
  schemaSql: string,
  consumer: string,
  key: string,
  version: bigint,
  message: ParkedJobData,
): Promise<{ version: bigint; parked: number; held: boolean; copy: boolean }> {
  const c = literal(consumer);
  const k = literal(key);
  const v = version.toString();
  const result = await tx.query(
    `INSERT INTO ${schemaSql}.inbox_versions (consumer, key, version) VALUES (${c}, ${k}, 0) ON CONFLICT DO NOTHING; ` +
      `WITH row AS (SELECT version, parked FROM ${schemaSql}.inbox_versions WHERE consumer = ${c} AND key = ${k} FOR UPDATE), ` +
      `ins AS (INSERT INTO ${schemaSql}.inbox_early (consumer, key, version, message) ` +
      `SELECT ${c}, ${k}, ${v}, ${literal(JSON.stringify(message))}::jsonb FROM row WHERE row.parked = 0 AND ${v} - 1 > row.version ` +
      'ON CONFLICT (consumer, key, version) DO NOTHING RETURNING 1) ' +
      'SELECT row.version::text AS version, row.parked, EXISTS (SELECT 1 FROM ins) AS held FROM row; COMMIT',
  );
  const results = (Array.isArray(result) ? result : [result]) as Array<{
    rows?: Array<{ version: string; parked: number; held: boolean }>;
  }>;
  const row = results[1]?.rows?.[0];
  if (!row) throw new InternalError(`inbox_versions row for consumer ${consumer} key ${key} vanished under its lock`);
  // Early, nothing parked, and nothing inserted: that version is stored already, so this is a second copy.
  const copy = !row.held && row.parked === 0 && version > BigInt(row.version) + 1n;
  return { version: BigInt(row.version), parked: row.parked, held: row.held, copy };
}

export interface ReadyEarly {
  version: bigint;
  message: ParkedJobData;
  attempts: number;
}

/**
 * The run of stored versions that follow the key's recorded one without a
 * hole (at most `limit`), when due and the key has nothing parked. One round trip.
 * The run is the start of the key's next `limit` stored versions, so LIMIT
 * bounds the read (`version <= recorded + limit` overflowed at the top of the range).
 */
export async function readyEarlyRun(q: Queryable, schemaSql: string, consumer: string, key: string, limit: number): Promise<ReadyEarly[]> {
  const { rows } = await q.query<{ version: string; recorded: string; message: ParkedJobData; attempts: number }>(
    `SELECT e.version::text AS version, v.version::text AS recorded, e.message, e.attempts FROM ${schemaSql}.inbox_early e
       JOIN ${schemaSql}.inbox_versions v ON v.consumer = e.consumer AND v.key = e.key
      WHERE e.consumer = $1 AND e.key = $2 AND e.version > v.version AND v.parked = 0
        AND e.next_attempt_at <= now()
      ORDER BY e.version
      LIMIT $3`,
    [consumer, key, limit],
  );
  const run: ReadyEarly[] = [];
  for (const r of rows) {
    const version = BigInt(r.version);
    if (version !== BigInt(r.recorded) + BigInt(run.length) + 1n) break;
    run.push({ version, message: r.message, attempts: r.attempts });
  }
  return run;
}

/** SQL (literals inlined) that removes one stored version: sent with the COMMIT that applied it. */
export function deleteEarlySql(schemaSql: string, consumer: string, key: string, version: bigint): string {
  return `DELETE FROM ${schemaSql}.inbox_early WHERE consumer = ${literal(consumer)} AND key = ${literal(key)} AND version = ${version.toString()}`;
}

/** A failed attempt at a stored version: due again after `delayMs`. Returns the attempts so far. */
export async function failEarly(
  q: Queryable,
  schemaSql: string,
  consumer: string,
  key: string,
  version: bigint,
  delayMs: number,
): Promise<number> {
  const { rows } = await q.query<{ attempts: number }>(
    `UPDATE ${schemaSql}.inbox_early SET attempts = attempts + 1, next_attempt_at = now() + $4 * interval '1 millisecond'
      WHERE consumer = $1 AND key = $2 AND version = $3 RETURNING attempts`,
    [consumer, key, version.toString(), delayMs],
  );
  return rows[0]?.attempts ?? 0;
}

export interface StoredEarly {
  version: bigint;
  message: ParkedJobData;
  waitedMs: number;
}

/** The key's lowest stored version above `above`, locked until the transaction ends. The caller holds the key's row lock. */
export async function lockFirstEarly(
  tx: Queryable,
  schemaSql: string,
  consumer: string,
  key: string,
  above: bigint,
): Promise<StoredEarly | undefined> {
  const { rows } = await tx.query<{ version: string; message: ParkedJobData; waited_ms: number }>(
    // ORDER BY the column, not the output name: `version` there would be the text alias, and
    // '10' < '9' (issue 28).
    `SELECT e.version::text AS version, e.message, (extract(epoch FROM now() - e.received_at) * 1000)::float8 AS waited_ms
       FROM ${schemaSql}.inbox_early e WHERE e.consumer = $1 AND e.key = $2 AND e.version > $3 ORDER BY e.version LIMIT 1 FOR UPDATE`,
    [consumer, key, above.toString()],
  );
  const r = rows[0];
  return r ? { version: BigInt(r.version), message: r.message, waitedMs: Math.round(r.waited_ms) } : undefined;
}

/** Removes one stored version (moved to the parking lot in the same transaction). */
export async function deleteEarly(tx: Queryable, schemaSql: string, consumer: string, key: string, version: bigint): Promise<void> {
  await tx.query(`DELETE FROM ${schemaSql}.inbox_early WHERE consumer = $1 AND key = $2 AND version = $3`, [
    consumer,
    key,
    version.toString(),
  ]);
}

export interface EarlyWork {
  key: string;
  /** The version after the recorded one is stored, due, and nothing of the key is parked. */
  ready: boolean;
  /** The key's oldest stored version has waited `gapTimeoutMs`. */
  expired: boolean;
}

/**
 * The sweep's one read: keys whose stored versions can be applied now, or
 * have waited too long. Versions no longer newer than the recorded one
 * (applied meanwhile by another path) are deleted first, in the same round trip.
 * `e.version - 1` is taken only of rows where `e.version > v.version`, so it
 * cannot underflow (the aggregates see only the rows WHERE keeps).
 */
export async function findEarlyWork(
  q: Queryable,
  schemaSql: string,
  consumer: string,
  gapTimeoutMs: number,
  limit: number,
): Promise<EarlyWork[]> {
  const { rows } = await q.query<EarlyWork>(
    `WITH stale AS (
       DELETE FROM ${schemaSql}.inbox_early e USING ${schemaSql}.inbox_versions v
        WHERE e.consumer = $1 AND v.consumer = e.consumer AND v.key = e.key AND e.version <= v.version
       RETURNING e.key
     )
     SELECT e.key,
            bool_or(e.version - 1 = v.version AND v.parked = 0 AND e.next_attempt_at <= now()) AS ready,
            min(e.received_at) < now() - $2 * interval '1 millisecond' AS expired
       FROM ${schemaSql}.inbox_early e JOIN ${schemaSql}.inbox_versions v ON v.consumer = e.consumer AND v.key = e.key
      WHERE e.consumer = $1 AND e.version > v.version
      GROUP BY e.key
     HAVING bool_or(e.version - 1 = v.version AND v.parked = 0 AND e.next_attempt_at <= now())
         OR min(e.received_at) < now() - $2 * interval '1 millisecond'
      LIMIT $3`,
    [consumer, gapTimeoutMs, limit],
  );
  return rows;
}
