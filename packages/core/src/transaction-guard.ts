import { ValidationError } from './errors.js';

/**
 * Whether a connection handed to Ferry is inside a transaction block, as far
 * as its driver lets Ferry tell. The one place this is decided: the publisher
 * calls `requireTransaction` before and `requireStillInTransaction` after its
 * statement, and each adapter refuses what its library can tell is not a
 * transaction (see docs/publisher.md, "What can be detected").
 *
 * - `pool`: a connection pool (`pg.Pool`): every statement takes any idle
 *   connection and commits on its own, so it is never a transaction.
 * - `idle`: a connection whose last ReadyForQuery said `I` (no transaction
 *   block) and that has nothing queued, so its next statement commits alone.
 * - `transaction`: in a block (`T`), or in a failed one (`E`: the statement
 *   fails anyway).
 * - `unknown`: the driver does not say (a plain `Queryable`, an adapter, a
 *   node-postgres client with statements still in flight).
 */
export type TransactionState = 'pool' | 'idle' | 'transaction' | 'unknown';

/**
 * Optional on a `Queryable`: an adapter whose library can tell implements it
 * (true: in a transaction block now; false: not; undefined: cannot tell).
 */
export interface TransactionAware {
  inTransaction?(): boolean | undefined;
}

interface NodePostgresLike {
  getTransactionStatus?(): string | null;
  readyForQuery?: boolean;
}

/** A node-postgres `Pool` (pg-pool): counts its clients and hands them out with connect(). */
function isPool(tx: object): boolean {
  const p = tx as { connect?: unknown; totalCount?: unknown; idleCount?: unknown; processID?: unknown };
  return typeof p.connect === 'function' && typeof p.totalCount === 'number' && typeof p.idleCount === 'number' && !('processID' in p);
}

/**
 * node-postgres (pg 8.21 and later, JS client) records the status byte of
 * each ReadyForQuery (`I` idle, `T` in a transaction block, `E` in a failed
 * one) and exposes it as `getTransactionStatus()`; the native client (and an
 * older pg) returns null or lacks it: unknown. The byte describes the state
 * after the last statement that completed: it is the state the next statement
 * meets only when nothing is in flight or queued, which `readyForQuery ===
 * true` says (the client sends a queued statement as soon as it is ready).
 */
export function transactionState(tx: unknown): TransactionState {
  if (typeof tx !== 'object' || tx === null) return 'unknown';
  if (isPool(tx)) return 'pool';
  const aware = (tx as TransactionAware).inTransaction;
  if (typeof aware === 'function') {
    const inside = aware.call(tx);
    return inside === undefined ? 'unknown' : inside ? 'transaction' : 'idle';
  }
  const pgClient = tx as NodePostgresLike;
  if (typeof pgClient.getTransactionStatus !== 'function') return 'unknown';
  const status = pgClient.getTransactionStatus();
  if (status === 'T' || status === 'E') return 'transaction';
  if (status === 'I' && pgClient.readyForQuery === true) return 'idle';
  return 'unknown';
}

const HINT =
  'open one first: BEGIN on a client from pool.connect(), withTransaction(pool, fn), or an ORM transaction through fromKysely/fromKnex/fromDrizzle(trx)';

/** The error for a connection that is not in a transaction; adapters raise it for what their library can tell. */
export function notInTransactionError(what: string, field = 'tx'): ValidationError {
  return new ValidationError(
    field,
    `${what} is not inside a transaction, so the event would commit at once, whatever happens to the rest of your work; ${HINT}`,
  );
}

/** Throws before any SQL when `tx` is a pool, or a connection that is certainly not inside a transaction. */
export function requireTransaction(tx: unknown, field = 'tx'): void {
  const state = transactionState(tx);
  if (state === 'pool') {
    throw new ValidationError(
      field,
      `${field} is a connection pool: each statement runs on any connection and commits at once, so the event could not be atomic with your writes; ${HINT}`,
    );
  }
  if (state === 'idle') throw notInTransactionError(`${field} (a connection with no BEGIN)`, field);
}

/**
 * After a statement: a connection that is now idle ran it outside a
 * transaction block (it was pipelined behind statements still in flight
 * when `requireTransaction` looked), so it has already committed. Too late to
 * refuse, but never silent.
 */
export function requireStillInTransaction(tx: unknown, field = 'tx'): void {
  if (transactionState(tx) === 'idle') {
    throw new ValidationError(
      field,
      `${field} ran the publish outside a transaction (no BEGIN before it): the event is already committed on its own, not atomically with your writes; ${HINT}`,
    );
  }
}
