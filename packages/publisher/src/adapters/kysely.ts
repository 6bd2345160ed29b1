import { notInTransactionError, type Queryable, type TransactionAware } from '@ferry/core';
import { CompiledQuery, type Kysely, type Transaction } from 'kysely';

/**
 * A Kysely transaction (PostgresDialect) as a Ferry `Queryable`.
 *
 * @example
 * await db.transaction().execute(async (trx) => {
 *   await trx.insertInto('orders').values({ id }).execute();
 *   await publisher.publish(fromKysely(trx), { subject: 'orders.placed', key: id, type: 'OrderPlaced', data: { id } });
 * });
 */
export function fromKysely<DB>(trx: Transaction<DB> | Kysely<DB>): Queryable & TransactionAware {
  // Kysely tells a Transaction (isTransaction true) from the database object, whose
  // every statement takes its own pooled connection and commits on its own.
  if ((trx as { isTransaction?: boolean }).isTransaction === false) throw notInTransactionError('fromKysely(db): a Kysely instance');
  return {
    async query<R>(text: string, values: unknown[] = []) {
      const result = await trx.executeQuery<R>(CompiledQuery.raw(text, values));
      return { rows: [...result.rows] };
    },
  };
}
