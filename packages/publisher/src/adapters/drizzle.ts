import { notInTransactionError, type Queryable } from '@ferry/core';
import { type SQL, sql } from 'drizzle-orm';

/** The part of a Drizzle node-postgres transaction Ferry uses. */
export interface DrizzleLike {
  execute(query: SQL): PromiseLike<unknown>;
  /** A Drizzle transaction has rollback(); the database object has transaction() but no rollback(). */
  rollback?: unknown;
  transaction?: unknown;
}

/**
 * A Drizzle transaction (node-postgres driver) as a Ferry `Queryable`.
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
      // value as one parameter (arrays stay arrays, not lists).
      const chunks: SQL[] = [];
      let last = 0;
      for (const m of text.matchAll(/\$(\d+)/g)) {
        chunks.push(sql.raw(text.slice(last, m.index)));
        chunks.push(sql`${sql.param(values[Number(m[1]) - 1])}`);
        last = m.index + m[0].length;
      }
      chunks.push(sql.raw(text.slice(last)));
      const result = (await tx.execute(sql.join(chunks))) as { rows: R[] };
      return { rows: result.rows };
    },
  };
}
