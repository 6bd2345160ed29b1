// The lease statements' own PostgreSQL connection (one job: run a statement on it, and say when it
// changes or ends). The leaser (lane-leaser.ts) decides what a new or ended connection means for the lanes.
import { hostname } from 'node:os';
import { protectPool } from '@ferry/core';
import pg from 'pg';

/**
 * The lease connection's `application_name`: `<app>:<instance>:lease:<pid>@<host>`. `ferry status`
 * reads the relay's own pid and host from it (the backend pid in pg_stat_activity is PostgreSQL's
 * process, not the relay's). PostgreSQL keeps 63 bytes, so the host is cut to fit.
 */
export function leaseApplicationName(applicationName: string): string {
  const base = `${applicationName}:lease:${process.pid}@`;
  return base + hostname().slice(0, Math.max(0, 63 - Buffer.byteLength(base)));
}

export interface LeaseConnectionOptions {
  databaseUrl: string;
  applicationName: string;
  leaseTermMs: number;
  /** Extra `pg` client settings (connect timeout, keepalive, server options). */
  pg?: pg.PoolConfig;
  /** A statement is about to run on a connection other than the last one (the first, or one after an end). */
  onNew: () => void;
  /** The current connection ended or failed (terminated, reset, dropped after a timed-out statement). */
  onEnded: () => void;
}

/**
 * One connection of its own, so a busy or hung relay pool never delays a
 * renewal. Every wait on it is bounded by a third of the term: a renewal
 * that cannot finish by then is not worth waiting for.
 */
export class LeaseConnection {
  readonly #o: LeaseConnectionOptions;
  readonly #pool: pg.Pool;
  #client: pg.PoolClient | undefined;

  constructor(options: LeaseConnectionOptions) {
    this.#o = options;
    const bound = Math.max(100, Math.floor(options.leaseTermMs / 3));
    this.#pool = new pg.Pool({
      keepAlive: true,
      ...options.pg,
      connectionTimeoutMillis: Math.min(bound, options.pg?.connectionTimeoutMillis ?? bound),
      connectionString: options.databaseUrl,
      application_name: leaseApplicationName(options.applicationName),
      max: 1,
      // Never closed when idle: the heartbeat names this connection's backend, and others take the lanes of an
      // instance whose connection is gone.
      idleTimeoutMillis: 0,
      query_timeout: bound,
      statement_timeout: bound,
    });
    this.#pool.on('error', () => {});
    protectPool(this.#pool); // a connection terminated between two statements must not crash the process
  }

  async query<R extends pg.QueryResultRow>(text: string, values: unknown[]): Promise<R[]> {
    const client = await this.#pool.connect();
    if (client !== this.#client) {
      this.#client = client;
      this.#o.onNew();
      client.once('end', () => {
        if (client !== this.#client) return;
        this.#client = undefined;
        this.#o.onEnded();
      });
    }
    try {
      const { rows } = await client.query<R>(text, values);
      client.release();
      return rows;
    } catch (err) {
      // A timed-out statement may leave a half-open socket behind: never reuse that connection.
      client.release(err as Error);
      throw err;
    }
  }

  async end(): Promise<void> {
    await this.#pool.end().catch(() => {});
  }
}
