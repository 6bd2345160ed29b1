import { type ConnectionPool, guardConnection, type PooledConnection } from './queryable.js';

/**
 * What the body of {@link withTransaction} may do with the transaction besides
 * running statements on it: end it early (a replay that writes nothing rolls
 * back and returns), or end it with the statement that also does its last
 * work, in one round trip (`DELETE …; COMMIT`).
 */
export interface TransactionControl {
  /** Whether the transaction is still open (not yet committed or rolled back). */
  readonly open: boolean;
  /** Sends `sql`, which ends the transaction (`'COMMIT'`, `'ROLLBACK'`, or `'…; COMMIT'`), and marks it ended. */
  end(sql: string): Promise<void>;
  /** Marks the transaction ended by a statement the body already sent (`SELECT …; ROLLBACK`). */
  ended(): void;
}

/** How {@link withTransaction} opens its transaction. */
export interface TransactionOptions {
  /**
   * The statement that opens the transaction. Default `'BEGIN'`. `null` when
   * the body's first statement opens it itself (`BEGIN; SELECT …` in one round
   * trip): the transaction counts as open from the start either way.
   *
   * @example
   * { begin: 'BEGIN ISOLATION LEVEL READ COMMITTED' }
   */
  begin?: string | null;
}

/**
 * Runs `fn` in a transaction on a connection of its own, for callers that have
 * no transaction yet. Commits when `fn` resolves with the transaction still
 * open, rolls back when it throws; a connection whose ROLLBACK fails (or that
 * emitted `error` while checked out) is discarded instead of going back to the
 * pool. The one transaction lifecycle of every Ferry package: the inbox's
 * gate, the idempotency store and `migrate` run through it too.
 *
 * @example
 * await withTransaction(pool, async (tx) => {
 *   await tx.query('UPDATE orders SET status = $1 WHERE id = $2', ['placed', id]);
 *   await publisher.publish(tx, { subject: 'orders.placed', key: id, type: 'OrderPlaced', data: { id } });
 * });
 */
export async function withTransaction<T>(
  pool: ConnectionPool,
  fn: (tx: PooledConnection, control: TransactionControl) => Promise<T>,
  options?: TransactionOptions,
): Promise<T> {
  const client = await pool.connect();
  const release = guardConnection(client);
  let broken: Error | undefined;
  let open = true;
  const control: TransactionControl = {
    get open() {
      return open;
    },
    async end(sql) {
      await client.query(sql);
      open = false;
    },
    ended() {
      open = false;
    },
  };
  try {
    const begin = options?.begin === undefined ? 'BEGIN' : options.begin;
    if (begin !== null) await client.query(begin);
    const result = await fn(client, control);
    if (open) await control.end('COMMIT');
    return result;
  } catch (err) {
    if (open) {
      try {
        await client.query('ROLLBACK');
      } catch (rollbackErr) {
        // The connection is unusable: discard it instead of returning it to the pool.
        broken = rollbackErr instanceof Error ? rollbackErr : new Error(String(rollbackErr));
      }
    }
    throw err;
  } finally {
    release(broken);
  }
}
