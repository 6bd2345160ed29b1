import type { Queryable } from '@ferry/core';

/**
 * Deletes a consumer's `dedupe` message ids older than the window; returns how many. The count
 * stays a bigint (text on the wire): as `::int` a round of more than 2^31-1 ids (a busy consumer's
 * first prune after a long pause) failed after the delete, rolling it back, on every round.
 */
export async function pruneMessages(db: Queryable, schemaSql: string, consumer: string, olderThanMs: number): Promise<number> {
  const { rows } = await db.query<{ n: string }>(
    `WITH gone AS (DELETE FROM ${schemaSql}.inbox_messages WHERE consumer = $1 AND received_at < now() - $2 * interval '1 millisecond' RETURNING 1)
     SELECT count(*)::text AS n FROM gone`,
    [consumer, olderThanMs],
  );
  return Number(rows[0]?.n ?? 0);
}
