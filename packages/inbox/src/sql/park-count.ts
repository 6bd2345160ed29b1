import type { Queryable } from '@ferry/core';

/** Adds `delta` to a key's parked count (never below 0); the caller holds the row lock. */
export async function addParked(tx: Queryable, schemaSql: string, consumer: string, key: string, delta: number): Promise<void> {
  await tx.query(`UPDATE ${schemaSql}.inbox_versions SET parked = greatest(parked + $3, 0) WHERE consumer = $1 AND key = $2`, [
    consumer,
    key,
    delta,
  ]);
}

/**
 * Discarding a parked event in `sequential` mode skips its version and only
 * its version: when it is the next one, the recorded version moves to it (and
 * over versions discarded earlier that follow it); when an earlier version is
 * still missing, it is remembered in `skipped` and the gate moves over it once
 * that earlier one applies. The caller holds the row lock. `version` is a
 * parked event's (0..2^63-1, readParkedJob), so `$3 - 1` cannot overflow, and
 * inbox_next_version cannot either (inbox migration 000007).
 */
export async function skipVersion(tx: Queryable, schemaSql: string, consumer: string, key: string, version: bigint): Promise<void> {
  await tx.query(
    `UPDATE ${schemaSql}.inbox_versions
        SET version = CASE WHEN version = $3::bigint - 1 THEN ${schemaSql}.inbox_next_version($3::bigint, skipped) ELSE version END,
            skipped = CASE
              WHEN version >= $3::bigint THEN skipped
              WHEN version = $3::bigint - 1 THEN ARRAY(SELECT x FROM unnest(skipped) AS x WHERE x > ${schemaSql}.inbox_next_version($3::bigint, skipped))
              ELSE ARRAY(SELECT DISTINCT x FROM unnest(skipped || $3::bigint) AS x ORDER BY x)
            END
      WHERE consumer = $1 AND key = $2`,
    [consumer, key, version.toString()],
  );
}
