import { createHash } from 'node:crypto';
import {
  type ConnectionPool,
  describeValue,
  type PooledConnection,
  protectPool,
  quoteIdentifier,
  SQLSTATE,
  sqlState,
  ValidationError,
  withTransaction,
} from '@ferry/core';
import { decodeBody, encodeBody } from './body.js';
import { IdempotencyConflictError, IdempotencyInProgressError } from './errors.js';
import { fingerprintHash } from './fingerprint.js';
import { withoutIdentityHeaders } from './identity-headers.js';
import { validateIdempotencyKey } from './key.js';
import { compileIdempotencyOptions } from './options.js';
import { principalColumn } from './principal.js';
import { claimKeySql } from './sql/claim-key.js';
import { findKeySql, type KeyRow } from './sql/find-key.js';
import { storeResultSql } from './sql/store-result.js';
import type {
  CompiledIdempotencyOptions,
  Idempotency,
  IdempotencyOptions,
  IdempotentOperation,
  IdempotentRequest,
  IdempotentResult,
  OperationResult,
} from './types.js';

/**
 * Client errors that say "not executed, try again" rather than answer the
 * request: 408 Request Timeout, 409 Conflict, 425 Too Early, 429 Too Many
 * Requests. Stored, they would be replayed to every retry (a client backing
 * off after a 429 would get the 429 forever), so like a 5xx they are never
 * stored: the operation's writes roll back and the key is released
 * (docs/idempotency.md, "Outcomes").
 */
export const RETRY_LATER_STATUSES: ReadonlySet<number> = new Set([408, 409, 425, 429]);

/** lock_not_available: `lock_timeout` expired while waiting for the first request. */
const LOCK_NOT_AVAILABLE = '55P03';
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const HEADER_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

/** The operation's answer, checked before anything is stored. */
function checkResult(result: unknown): Required<Pick<OperationResult, 'status' | 'headers'>> & { body: unknown } {
  if (typeof result !== 'object' || result === null) {
    throw new ValidationError('result', `the operation must return { status, body?, headers? }, got ${describeValue(result)}`);
  }
  const r = result as OperationResult;
  if (!Number.isInteger(r.status) || r.status < 200 || r.status > 599) {
    throw new ValidationError(
      'result.status',
      `the operation's result status must be an HTTP status from 200 to 599, got ${describeValue(r.status)}`,
    );
  }
  // A Map, then fromEntries: a header named `__proto__` stays an own entry instead of replacing the prototype.
  const headers = new Map<string, string>();
  if (r.headers !== undefined) {
    if (typeof r.headers !== 'object' || r.headers === null) {
      throw new ValidationError(
        'result.headers',
        `the operation's result headers must be an object of strings, got ${describeValue(r.headers)}`,
      );
    }
    for (const [name, value] of Object.entries(r.headers)) {
      if (!HEADER_NAME.test(name) || typeof value !== 'string' || !HEADER_VALUE.test(value)) {
        throw new ValidationError(
          `result.headers.${name}`,
          `result header ${describeValue(name)}: ${describeValue(value)} is not a valid HTTP header`,
        );
      }
      headers.set(name, value);
    }
  }
  return { status: r.status, headers: Object.fromEntries(headers), body: r.body };
}

/** One caller's key: the row's primary key is (scope, principal, key). */
interface CallerKey {
  readonly key: string;
  /** The `principal` column: a digest, or `'*'` for a global key. */
  readonly principal: string;
}

/** A 64-bit advisory lock id for one caller's key: serialises requests with that key, across processes. */
function advisoryLockId(schema: string, scope: string, { principal, key }: CallerKey): string {
  const digest = createHash('sha256')
    .update(JSON.stringify(['ferry:idempotency', schema, scope, principal, key]))
    .digest();
  return digest.readBigInt64BE(0).toString();
}

class IdempotencyKeys implements Idempotency {
  readonly options: CompiledIdempotencyOptions;
  readonly #findSql: string;
  readonly #claimSql: string;
  readonly #storeSql: string;

  constructor(options: IdempotencyOptions) {
    this.options = compileIdempotencyOptions(options);
    const s = quoteIdentifier(this.options.schema);
    this.#findSql = findKeySql(s);
    this.#claimSql = claimKeySql(s);
    this.#storeSql = storeResultSql(s);
  }

  async run(pool: ConnectionPool, request: IdempotentRequest, operation: IdempotentOperation): Promise<IdempotentResult> {
    protectPool(pool);
    if (typeof operation !== 'function')
      throw new ValidationError('operation', 'run() needs the operation as its third argument: async (tx) => ({ status, body })');
    if (typeof request !== 'object' || request === null) {
      throw new ValidationError(
        'request',
        'run() needs { key, principal (or globalKey: true), fingerprint: { method, path, contentType, body } }',
      );
    }
    const key = validateIdempotencyKey(request.key);
    const principal = principalColumn(request);
    const fingerprint = fingerprintHash(request.fingerprint);
    const callerKey: CallerKey = { key, principal };
    // The common retry finds a finished record without taking a transaction or a lock.
    const { rows } = await pool.query<KeyRow>(this.#findSql, [this.options.scope, principal, key]);
    const row = rows[0];
    if (row) return this.#replay(row, key, fingerprint);
    return this.#claimAndRun(pool, callerKey, fingerprint, operation);
  }

  #replay(row: KeyRow, key: string, fingerprint: Buffer): IdempotentResult {
    const { scope, logger } = this.options;
    if (!row.fingerprint.equals(fingerprint)) {
      logger.warn({ event: 'idempotency:conflict', scope, key }, 'Idempotency-Key reused for a different request');
      throw new IdempotencyConflictError(scope, key);
    }
    // Ferry never commits a row without its answer; one without is someone else's doing.
    if (row.status === null) throw new IdempotencyInProgressError(scope, key, 0);
    logger.debug({ event: 'idempotency:replayed', scope, key, status: row.status }, 'replaying the stored answer');
    return Object.freeze({
      status: row.status,
      // Never stored by this code; stripped here too, for rows written some other way.
      headers: Object.freeze(withoutIdentityHeaders(row.headers)),
      body: decodeBody(row.body_kind, row.body),
      replayed: true,
    });
  }

  /** Waits for (or, in reject mode, tests) the lock of any request running with this key. */
  async #lock(tx: PooledConnection, callerKey: CallerKey): Promise<void> {
    const { schema, scope, onConcurrent, waitMs } = this.options;
    const { key } = callerKey;
    const id = advisoryLockId(schema, scope, callerKey);
    if (onConcurrent === 'reject') {
      const { rows } = await tx.query<{ locked: boolean }>('SELECT pg_try_advisory_xact_lock($1::bigint) AS locked', [id]);
      if (!rows[0]?.locked) throw new IdempotencyInProgressError(scope, key, 0);
      return;
    }
    // Target-list expressions run left to right: read the caller's lock_timeout, then bound our wait.
    const { rows } = await tx.query<{ prev: string }>(
      "SELECT current_setting('lock_timeout') AS prev, set_config('lock_timeout', $1, true)",
      [`${waitMs}ms`],
    );
    try {
      // Takes the lock, then gives the operation's own statements the caller's lock_timeout back.
      await tx.query("SELECT pg_advisory_xact_lock($1::bigint), set_config('lock_timeout', $2, true)", [id, rows[0]?.prev ?? '0']);
    } catch (err) {
      if (sqlState(err) === LOCK_NOT_AVAILABLE) throw new IdempotencyInProgressError(scope, key, waitMs, { cause: err });
      throw err;
    }
  }

  #storable(status: number): boolean {
    if (status >= 500 || RETRY_LATER_STATUSES.has(status)) return false;
    if (status >= 400) return this.options.storeClientErrors;
    return true;
  }

  async #claimAndRun(
    pool: ConnectionPool,
    callerKey: CallerKey,
    fingerprint: Buffer,
    operation: IdempotentOperation,
  ): Promise<IdempotentResult> {
    const { scope, retentionMs, logger } = this.options;
    const { key, principal } = callerKey;
    return withTransaction(
      pool,
      async (tx, transaction) => {
        await this.#lock(tx, callerKey);
        let claimed: boolean;
        try {
          claimed = (await tx.query(this.#claimSql, [scope, principal, key, fingerprint, retentionMs])).rows.length === 1;
        } catch (err) {
          // Only a writer that skipped the advisory lock (another Ferry version, a hand-written INSERT) gets here.
          if (sqlState(err) === SQLSTATE.uniqueViolation) throw new IdempotencyInProgressError(scope, key, 0, { cause: err });
          throw err;
        }
        if (!claimed) {
          // A live record committed before we got the lock: this request is a retry (or a misuse of the key).
          const { rows } = await tx.query<KeyRow>(this.#findSql, [scope, principal, key]);
          await transaction.end('ROLLBACK');
          const row = rows[0];
          if (!row) throw new IdempotencyInProgressError(scope, key, 0);
          return this.#replay(row, key, fingerprint);
        }
        const result = checkResult(await operation(tx));
        if (!this.#storable(result.status)) {
          // Not an answer worth replaying: undo the operation's writes too, so a retry starts clean.
          await transaction.end('ROLLBACK');
          logger.debug({ event: 'idempotency:released', scope, key, status: result.status }, 'result not stored; key released');
          return Object.freeze({ status: result.status, headers: Object.freeze(result.headers), body: result.body, replayed: false });
        }
        const body = encodeBody(result.body);
        // The first response keeps its Set-Cookie; the stored one, replayed to every retry, never does.
        const stored = withoutIdentityHeaders(result.headers);
        await tx.query(this.#storeSql, [scope, principal, key, result.status, JSON.stringify(stored), body.bytes, body.kind]);
        await transaction.end('COMMIT');
        logger.debug({ event: 'idempotency:stored', scope, key, status: result.status }, 'operation committed with its key');
        return Object.freeze({ status: result.status, headers: Object.freeze(result.headers), body: result.body, replayed: false });
      },
      { begin: 'BEGIN ISOLATION LEVEL READ COMMITTED' },
    );
  }
}

/**
 * Creates the request-edge idempotency store. Needs the `idempotency`
 * migrations in `schema` (`ferry migrate --idempotency`).
 *
 * @example
 * const keys = createIdempotency({ schema: 'ferry', retention: '24h', scope: 'orders-api' });
 */
export function createIdempotency(options: IdempotencyOptions = {}): Idempotency {
  return new IdempotencyKeys(options);
}
