import { InternalError, type Queryable } from '@ferry/core';

export interface KeyRow {
  /** Last applied version; 0 when none. */
  version: bigint;
  /** Events of the key parked and not yet resolved (`sequential` mode). */
  parked: number;
}

/**
 * Takes the `(consumer, key)` row lock and reads the row. The usual case (the
 * row exists) is one round trip. For a key's first event the row is inserted
 * with `ON CONFLICT DO NOTHING` first: a second process inserting the same key
 * waits on the unique index until the first commits, so even version 1 is
 * serialised across processes.
 */
export async function lockKey(tx: Queryable, schemaSql: string, consumer: string, key: string): Promise<KeyRow> {
  const select = `SELECT version::text AS version, parked FROM ${schemaSql}.inbox_versions WHERE consumer = $1 AND key = $2 FOR UPDATE`;
  let { rows } = await tx.query<{ version: string; parked: number }>(select, [consumer, key]);
  if (rows.length === 0) {
    await tx.query(`INSERT INTO ${schemaSql}.inbox_versions (consumer, key, version) VALUES ($1, $2, 0) ON CONFLICT DO NOTHING`, [
      consumer,
      key,
    ]);
    ({ rows } = await tx.query<{ version: string; parked: number }>(select, [consumer, key]));
  }
  const row = rows[0];
  if (!row) throw new InternalError(`inbox_versions row for consumer ${consumer} key ${key} vanished under its lock`);
  return { version: BigInt(row.version), parked: row.parked };
}
