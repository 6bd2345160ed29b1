/**
 * The least Ferry needs from a connection: a `pg.PoolClient` or `pg.Client`
 * fits as is; ORMs fit through the publisher's adapters. The publisher needs
 * one inside a transaction and refuses a `pg.Pool` (see transaction-guard.ts);
 * a pool goes to `withTransaction(pool, fn)`.
 */
export interface Queryable {
  query<R = Record<string, unknown>>(text: string, values?: unknown[]): Promise<{ rows: R[] }>;
}

/** A pool Ferry may take connections from (a `pg.Pool`). */
export interface ConnectionPool extends Queryable {
  connect(): Promise<PooledConnection>;
}

export interface PooledConnection extends Queryable {
  release(err?: Error | boolean): void;
  /** node-postgres clients are EventEmitters: a connection lost while checked out emits `error`. */
  on?(event: 'error', listener: (err: Error) => void): unknown;
  off?(event: 'error', listener: (err: Error) => void): unknown;
}

const protectedPools = new WeakSet<object>();

/**
 * Gives every connection the pool opens from now on an `error` listener of
 * its own, for its whole life, so a backend terminated at any moment can never
 * raise an unheard `error` that ends the process. The long chaos runs still
 * saw inbox consumers exit on SQLSTATE 57P01 after every checkout had a
 * guard (1-2 per 100,000 events; a pg.Client patched to report it showed a
 * connection whose last statement had been a `pool.query`, listened to by no
 * one when the backend died); the exact gap in pg-pool was not pinned down,
 * so the listener is on the connection itself. Owners still learn of the loss
 * from their next query. Idempotent per pool; a pool without `on` (not
 * node-postgres) is left alone.
 */
export function protectPool(pool: object): void {
  const emitter = pool as { on?: (event: 'connect', listener: (client: PooledConnection) => void) => unknown };
  if (typeof emitter.on !== 'function' || protectedPools.has(pool)) return;
  protectedPools.add(pool);
  emitter.on('connect', (client) => {
    client.on?.('error', () => {});
  });
}

/**
 * Listens for `error` on a checked-out connection until it is released.
 * node-postgres emits `error` on a checked-out client whose connection dies
 * between queries (`pg_terminate_backend`, a failover), and an unheard
 * `error` event ends the process. The returned `release` discards a broken
 * connection instead of returning it to the pool.
 */
export function guardConnection(client: PooledConnection): (err?: Error) => void {
  let lost: Error | undefined;
  const onError = (err: Error) => {
    lost = err;
  };
  client.on?.('error', onError);
  return (err?: Error) => {
    client.off?.('error', onError);
    client.release(err ?? lost);
  };
}
