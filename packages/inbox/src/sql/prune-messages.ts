import type { Queryable } from '@ferry/core';

/** Deletes a consumer's `dedupe` message ids older than the window; returns how many. */
export async function pruneMessages(db: Queryable, schemaSql: string, consumer: string, olderThanMs: number): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `WITH gone AS (DELETE FROM ${schemaSql}.inbox_messages WHERE consumer = $1 AND received_at < now() - $2 * interval '1 millisecond' RETURNING 1)
     SELECT count(*)::int AS n FROM gone`,
    [consumer, olderThanMs],
  );
  return rows[0]?.n ?? 0;
}
