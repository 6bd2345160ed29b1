import type { Queryable } from '@ferry/core';

/** Records the applied version; the caller holds the row lock (`lockKey`). */
export async function recordVersion(tx: Queryable, schema: string, consumer: string, key: string, version: bigint): Promise<void> {
  await tx.query(`UPDATE ${schema}.inbox_versions SET version = $3, applied_at = now() WHERE consumer = $1 AND key = $2`, [
    consumer,
    key,
    version.toString(),
  ]);
}
