import type { Queryable } from '@ferry/core';

/** Adds `delta` to a key's parked count (never below 0); the caller holds the row lock. */
export async function addParked(tx: Queryable, schema: string, consumer: string, key: string, delta: number): Promise<void> {
  await tx.query(`UPDATE ${schema}.inbox_versions SET parked = greatest(parked + $3, 0) WHERE consumer = $1 AND key = $2`, [
    consumer,
    key,
    delta,
  ]);
}

/** Discarding a parked event in `sequential` mode skips its version, so the key's later events can apply. */
export async function skipVersion(tx: Queryable, schema: string, consumer: string, key: string, version: bigint): Promise<void> {
  await tx.query(`UPDATE ${schema}.inbox_versions SET version = greatest(version, $3) WHERE consumer = $1 AND key = $2`, [
    consumer,
    key,
    version.toString(),
  ]);
}
