import { notInTransactionError, type Queryable, type TransactionAware } from '@ferry/core';

/** The part of a Knex transaction Ferry uses. */
export interface KnexLike {
  raw(sql: string, bindings: readonly unknown[]): PromiseLike<unknown>;
  /** Set (true) on a Knex transaction; the knex instance has none. */
  isTransaction?: boolean;
  /** A Knex transaction: whether it has committed or rolled back. */
  isCompleted?: () => boolean;
  /** Every knex instance and transaction has its client. */
  client?: unknown;
}

/**
 * A Knex transaction (pg client) as a Ferry `Queryable`.
 *
 * @example
 * await knex.transaction(async (trx) => {
 *   await trx('orders').insert({ id });
 *   await publisher.publish(fromKnex(trx), { subject: 'orders.placed', key: id, type: 'OrderPlaced', data: { id } });
 * });
 */
export function fromKnex(trx: KnexLike): Queryable & TransactionAware {
  // A knex instance runs each statement on any pooled connection; only a transaction is atomic.
  if (trx.client !== undefined && trx.isTransaction !== true) throw notInTransactionError('fromKnex(knex): a knex instance');
  return {
    inTransaction: () => (typeof trx.isCompleted === 'function' ? !trx.isCompleted() : undefined),
    async query<R>(text: string, values: unknown[] = []) {
      // Knex binds with `?`; rewrite `$n` (which may repeat) into positional bindings.
      const bindings: unknown[] = [];
      const sql = text.replace(/\?/g, '\\?').replace(/\$(\d+)/g, (_, n: string) => {
        bindings.push(values[Number(n) - 1]);
        return '?';
      });
      const result = (await trx.raw(sql, bindings)) as { rows: R[] };
      return { rows: result.rows };
    },
  };
}
