import { notInTransactionError, type Queryable, sqlState } from '@ferry/core';
import { type SQL, sql } from 'drizzle-orm';
import { toArrayLiteral } from './postgres-text.js';
import { withNodePostgresNames } from './server-error.js';

/** The part of a Drizzle transaction Ferry uses. */
export interface DrizzleLike {
  execute(query: SQL): PromiseLike<unknown>;
  /** A Drizzle transaction has rollback(); the database object has transaction() but no rollback(). */
  rollback?: unknown;
  transaction?: unknown;
}

/**
 * A Drizzle transaction as a Ferry `Queryable`, on the node-postgres driver
 * (`drizzle-orm/node-postgres`) or the postgres.js driver
 * (`drizzle-orm/postgres-js`).
 *
 * @example
 * await db.transaction(async (tx) => {
 *   await tx.insert(orders).values({ id });
 *   await publisher.publish(fromDrizzle(tx), { subject: 'orders.placed', key: id, type: 'OrderPlaced', data: { id } });
 * });
 */
export function fromDrizzle(tx: DrizzleLike): Queryable {
  if (typeof tx.transaction === 'function' && typeof tx.rollback !== 'function') {
    throw notInTransactionError('fromDrizzle(db): a Drizzle database');
  }
  return {
    async query<R>(text: string, values: unknown[] = []) {
      // Rebuild the statement from its text and parameters; `sql.param` binds a
      // value as one parameter. Arrays go as array literals: postgres.js would
      // type an array by its first element, and an array of Buffers as one
      // `bytea` (see postgres-text.ts). Scalars pass as they are: drizzle's
      // postgres-js driver turns off postgres.js's JSON and date serializers.
      const chunks: SQL[] = [];
      let last = 0;
      for (const m of text.matchAll(/\$(\d+)/g)) {
        const value = values[Number(m[1]) - 1];
        chunks.push(sql.raw(text.slice(last, m.index)));
        chunks.push(sql`${sql.param(Array.isArray(value) ? toArrayLiteral(value) : value)}`);
        last = m.index + m[0].length;
      }
      chunks.push(sql.raw(text.slice(last)));
      let result: unknown;
      try {
        result = await tx.execute(sql.join(chunks));
      } catch (err) {
        // Drizzle 0.44+ wraps the driver's error in a DrizzleQueryError (whose
        // message prints every parameter, the event's payload too); the
        // publisher reads the SQLSTATE and constraint of the driver's own.
        const cause = (err as { cause?: unknown } | null)?.cause;
        throw withNodePostgresNames(sqlState(err) === undefined && sqlState(cause) !== undefined ? cause : err);
      }
      // node-postgres answers { rows }, postgres.js with the array of rows.
      return { rows: (Array.isArray(result) ? result : (result as { rows: R[] }).rows) as R[] };
    },
  };
}
