import type { Queryable } from '@ferry/core';

/**
 * `dedupe` mode: records the message id; `false` when it was already there.
 * A concurrent insert of the same id waits on the primary key until the other
 * transaction ends, so only one of two racing deliveries gets `true`.
 */
export async function recordMessage(tx: Queryable, schema: string, consumer: string, id: string): Promise<boolean> {
  const { rows } = await tx.query(
    `INSERT INTO ${schema}.inbox_messages (consumer, id) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING 1 AS ok`,
    [consumer, id],
  );
  return rows.length === 1;
}
