import { TransactionTimeoutError } from './errors.js';
import { type ConnectionPool, guardConnection, type PooledConnection, type Queryable } from './queryable.js';

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
  /**
   * A bound on the whole transaction by the client's clock, from
   * `pool.connect()` to the answer to COMMIT. When it passes, whatever the
   * body is waiting on, the connection is released with a
   * {@link TransactionTimeoutError} (a `pg.Pool` destroys it, never hands it
   * out again: its statements in flight fail) and `withTransaction` rejects
   * with that error at once. What PostgreSQL still holds for the lost
   * session (row locks) it ends by its own timeouts
   * (`idle_in_transaction_session_timeout`). Default: no bound.
   */
  timeoutMs?: number;
  /** The option named in the timeout's message, e.g. `maxTransactionMs`. Default `timeoutMs`. */
  timeoutOption?: string;
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
  const timeoutMs = options?.timeoutMs;
  if (timeoutMs === undefined) return runTransaction(await pool.connect(), fn, options, undefined);
  // A statement whose answer can never come (a partition that resets nothing, a half-open socket)
  // waits forever on a node-postgres pool configured without query_timeout (the default): only the
  // client's clock can end it, and only by giving the connection up.
  let timer: ReturnType<typeof setTimeout> | undefined;
  let onTimeout: ((err: Error) => void) | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const err = new TransactionTimeoutError(timeoutMs, options?.timeoutOption ?? 'timeoutMs');
      onTimeout?.(err);
      reject(err);
    }, timeoutMs);
  });
  expired.catch(() => {}); // raced below; never unhandled
  const bounded = <V>(p: Promise<V>): Promise<V> => Promise.race([p, expired]);
  try {
    const connecting = pool.connect();
    let client: PooledConnection;
    try {
      client = await bounded(connecting);
    } catch (err) {
      // A connection that arrives after the bound is not in a transaction: it goes back as it is.
      connecting.then(
        (late) => late.release(),
        () => {},
      );
      throw err;
    }
    return await runTransaction(client, fn, options, {
      bounded,
      onTimeout: (handler) => {
        onTimeout = handler;
      },
    });
  } finally {
    clearTimeout(timer);
  }
}

interface Bound {
  /** Races a step against the transaction's deadline. */
  bounded<V>(p: Promise<V>): Promise<V>;
  /** Registers what to do with the connection when the deadline passes. */
  onTimeout(handler: (err: Error) => void): void;
}

/** The transaction's lifecycle on a connection already taken: BEGIN, body, COMMIT or ROLLBACK, release once. */
async function runTransaction<T>(
  client: PooledConnection,
  fn: (tx: PooledConnection, control: TransactionControl) => Promise<T>,
  options: TransactionOptions | undefined,
  bound: Bound | undefined,
): Promise<T> {
  const guardedRelease = guardConnection(client);
  let released = false;
  const release = (err?: Error) => {
    if (released) return;
    released = true;
    guardedRelease(err);
  };
  let timedOut: Error | undefined;
  // Released with the error, so the pool destroys the connection: its socket is closed under any
  // statement still waiting on it, and it is never handed out again mid-transaction.
  bound?.onTimeout((err) => {
    timedOut = err;
    release(err);
  });
  const step = <V>(p: Promise<V>): Promise<V> => (bound ? bound.bounded(p) : p);
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
    if (begin !== null) await step(client.query(begin));
    const result = await step(fn(client, control));
    if (open) await step(control.end('COMMIT'));
    return result;
  } catch (err) {
    if (timedOut) throw timedOut;
    if (open) {
      try {
        await step(client.query('ROLLBACK'));
      } catch (rollbackErr) {
        if (timedOut) throw timedOut;
        // The connection is unusable: discard it instead of returning it to the pool.
        broken = rollbackErr instanceof Error ? rollbackErr : new Error(String(rollbackErr));
      }
    }
    throw err;
  } finally {
    release(broken);
  }
}

/**
 * A `Queryable` whose every statement runs alone, outside any transaction, on
 * a connection of its own taken from `pool` (as `pool.query` does), within
 * `timeoutMs` by the client's clock: past it the connection is released with a
 * {@link TransactionTimeoutError} (a `pg.Pool` destroys it) and the statement
 * rejects with that error. A failed statement is followed by ROLLBACK, so a
 * multi-statement text that opened a block (pg-boss sends `BEGIN; …; COMMIT`)
 * never leaves its connection inside an aborted one. For a library's own statements on a caller's pool
 * that has no client-side timeout, so that one lost in a partition fails
 * instead of waiting forever.
 *
 * @example
 * const db = boundedQueries(pool, 10_000, 'maxTransactionMs');
 * await db.query('SELECT 1');
 */
export function boundedQueries(pool: ConnectionPool, timeoutMs: number, timeoutOption?: string): Queryable {
  const options: TransactionOptions = { begin: null, timeoutMs, ...(timeoutOption === undefined ? {} : { timeoutOption }) };
  return {
    query: <R>(text: string, values?: unknown[]) =>
      withTransaction(
        pool,
        async (client, control) => {
          const result = await client.query<R>(text, values);
          control.ended(); // no BEGIN: nothing to commit
          return result;
        },
        options,
      ),
  };
}
