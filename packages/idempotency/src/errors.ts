import { ConflictError, describeValue, ValidationError } from '@ferry/core';

/**
 * The `Idempotency-Key` is missing where required, empty, longer than 255
 * characters, or not printable ASCII. HTTP 400 in the bindings. Raised before
 * any SQL runs.
 */
export class IdempotencyKeyError extends ValidationError {
  /** The offending value (`undefined` when the header was missing). */
  declare readonly key: unknown;
  constructor(key: unknown, message: string) {
    super('Idempotency-Key', message);
    Object.assign(this, { name: 'IdempotencyKeyError', key });
  }
}

/**
 * A request with an `Idempotency-Key` but no principal (the caller) where keys
 * are scoped per caller: the principal function returned nothing (the request
 * is not authenticated), or `run()` got no `principal` and no
 * `globalKey: true`. HTTP 401 in the bindings. Raised before any SQL runs.
 */
export class IdempotencyPrincipalError extends ValidationError {
  /** What the principal was (`undefined`, `null`, `''`, or a value of the wrong type). */
  declare readonly principal: unknown;
  constructor(principal: unknown, message: string) {
    super('principal', message);
    Object.assign(this, { name: 'IdempotencyPrincipalError', principal });
  }
}

/**
 * The caller already used the key for a different request (another method,
 * target, content type or body). The stored result is not returned. HTTP 422
 * in the bindings. Not retryable: the client must use a new key for a new
 * request. Another caller's use of the same key is never a conflict: keys
 * are scoped per caller.
 */
export class IdempotencyConflictError extends ConflictError {
  declare readonly key: string;
  declare readonly scope: string;
  constructor(scope: string, key: string) {
    super(
      `Idempotency-Key ${describeValue(key)} (scope ${describeValue(scope)}) was already used by this caller for a different request (method, path and query, content type or body differ); use a new key for a new request`,
    );
    Object.assign(this, { name: 'IdempotencyConflictError', key, scope });
  }
}

/**
 * Another request with the same key is still running: in `reject` mode at
 * once, in `wait` mode after waiting `waitMs` for it. HTTP 409 in the
 * bindings. Retryable: retry later with the same key.
 */
export class IdempotencyInProgressError extends ConflictError {
  declare readonly key: string;
  declare readonly scope: string;
  /** How long this request waited for the other one (0 in `reject` mode). */
  declare readonly waitedMs: number;
  readonly retryable = true;
  constructor(scope: string, key: string, waitedMs: number, options?: { cause?: unknown }) {
    super(
      `a request with Idempotency-Key ${describeValue(key)} (scope ${describeValue(scope)}) is still in progress${waitedMs > 0 ? ` after waiting ${waitedMs} ms` : ''}; retry later with the same key`,
      options,
    );
    Object.assign(this, { name: 'IdempotencyInProgressError', key, scope, waitedMs });
  }
}

export const isIdempotencyKeyError = (e: unknown): e is IdempotencyKeyError => e instanceof IdempotencyKeyError;
export const isIdempotencyPrincipalError = (e: unknown): e is IdempotencyPrincipalError => e instanceof IdempotencyPrincipalError;
export const isIdempotencyConflictError = (e: unknown): e is IdempotencyConflictError => e instanceof IdempotencyConflictError;
export const isIdempotencyInProgressError = (e: unknown): e is IdempotencyInProgressError => e instanceof IdempotencyInProgressError;
