import type { ConnectionPool, Logger, PooledConnection } from '@ferry/core';

/** Pino-compatible logger (core's `Logger`, the subset Ferry calls). Default: silent. */
export type { Logger };

/** What a second request waits for while the first one with its key runs. */
export const ON_CONCURRENT = ['wait', 'reject'] as const;
export type OnConcurrent = (typeof ON_CONCURRENT)[number];

/**
 * What `createIdempotency()` accepts; every option is optional and has the
 * default named on it.
 *
 * @example
 * const keys = createIdempotency({
 *   schema: 'ferry',       // default: where `ferry migrate --idempotency` put idempotency_keys
 *   retention: '24h',      // default; at least 1 h
 *   scope: 'orders-api',   // default 'default'
 *   onConcurrent: 'wait',  // default: a duplicate in flight waits up to waitMs, then replays
 * });
 */
export interface IdempotencyOptions {
  /** Schema holding `idempotency_keys` (`ferry migrate --idempotency`). Default `ferry`. */
  schema?: string;
  /**
   * How long a key and its stored answer are kept: `'90m'`, `'24h'`, `'7d'`, or
   * milliseconds. Default `'24h'`; never less than 1 h. A retry after expiry
   * runs as a new request.
   */
  retention?: string | number;
  /** Namespace of the keys, e.g. the API's name, so two APIs cannot collide. Default `default`. */
  scope?: string;
  /** `wait` (default): a concurrent duplicate waits up to `waitMs` for the first, then replays its answer. `reject`: it gets HTTP 409 at once. */
  onConcurrent?: OnConcurrent;
  /** How long a concurrent duplicate waits in `wait` mode before HTTP 409. Default 10 000 ms. */
  waitMs?: number;
  /** Store and replay 4xx results like successes (default true). 5xx results are never stored. */
  storeClientErrors?: boolean;
  /** Where the store logs at `debug` (a stored or released key); pino-compatible. Default: silent. */
  logger?: Logger;
}

export interface CompiledIdempotencyOptions {
  readonly schema: string;
  readonly retentionMs: number;
  readonly scope: string;
  readonly onConcurrent: OnConcurrent;
  readonly waitMs: number;
  readonly storeClientErrors: boolean;
  readonly logger: Logger;
}

/**
 * What identifies "the same request" for one caller's key. Hashed (sha256 of
 * length-prefixed fields, `fingerprintHash`), never stored in clear. A retry
 * with the same key and another fingerprint is a conflict (HTTP 422).
 *
 * @example
 * const fingerprint = { method: 'POST', path: '/orders?dry=1', contentType: 'application/json', body: rawBytes };
 */
export interface RequestFingerprint {
  /** HTTP method, compared case-insensitively. */
  method: string;
  /** The request target: path and query string, as sent. */
  path: string;
  /** The `Content-Type` header as sent (`null`/absent when there was none). */
  contentType?: string | null;
  /**
   * The body: its exact bytes (`Uint8Array`, preferred), a parsed value (JSON
   * values, compared as canonical JSON: key order does not matter), or
   * `undefined` when there is none. Bytes and a parsed value never compare
   * equal.
   */
  body?: unknown;
}

/**
 * One request to `run()`. Keys are scoped per caller: give the caller's
 * `principal`, or `globalKey: true` when the application has decided that
 * keys are shared by every caller. Exactly one of the two.
 *
 * @example
 * await keys.run(pool, { key, principal: session.userId, fingerprint }, operation);
 */
export interface IdempotentRequest {
  /** The client's `Idempotency-Key`: 1-255 printable ASCII characters. */
  key: string;
  /**
   * Who is asking: the authenticated user or tenant id (1-1024 characters).
   * Part of the key: another caller's use of the same key is another key, so
   * one caller's stored answer is never replayed to another and nobody can
   * squat or probe someone else's keys. Stored as a sha256 digest.
   */
  principal?: string;
  /**
   * `true`: this key is shared by every caller (a stored answer is replayed to
   * whoever sends the key). Only for APIs with a single client, or whose keys
   * already carry the caller. Default `false`.
   */
  globalKey?: boolean;
  fingerprint: RequestFingerprint;
}

/**
 * An operation's answer. `body` is a JSON value, a string, bytes, or
 * `undefined` (no body). Headers that carry the caller's identity
 * (`IDENTITY_HEADERS`: `Set-Cookie` and friends) go to the first response
 * only; they are never stored, so a replay does not carry them.
 */
export interface OperationResult {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

export interface IdempotentResult {
  readonly status: number;
  readonly body: unknown;
  /** On a replay, the stored headers: never `Set-Cookie` or another of `IDENTITY_HEADERS`. */
  readonly headers: Readonly<Record<string, string>>;
  /** True when this is the stored answer of an earlier request and the operation did not run. */
  readonly replayed: boolean;
}

/** The operation: runs inside the transaction that also records the key. Never BEGIN or COMMIT on `tx`. */
export type IdempotentOperation = (tx: PooledConnection) => Promise<OperationResult>;

/**
 * Runs an operation once per `Idempotency-Key` and replays its stored answer
 * to every retry.
 *
 * @example
 * const keys = createIdempotency({ schema: 'ferry', retention: '24h', scope: 'orders-api' });
 * const result = await keys.run(pool, { key, principal: userId, fingerprint: { method: 'POST', path: '/orders', contentType, body } },
 *   async (tx) => {
 *     await tx.query('INSERT INTO orders (id) VALUES ($1)', [id]);
 *     await publisher.publish(tx, { subject: 'orders.placed', key: id, type: 'OrderPlaced', data: { id } });
 *     return { status: 201, body: { id } };
 *   });
 */
export interface Idempotency {
  readonly options: CompiledIdempotencyOptions;
  /**
   * Claims the caller's key (scope, principal, key) and runs `operation` in one transaction on a connection of
   * `pool`; stores the answer in the same transaction. A retry with the same
   * key and request gets the stored answer (`replayed: true`); with another
   * request, `IdempotencyConflictError`. If `operation` throws, or answers
   * 5xx (or 4xx with `storeClientErrors: false`), the transaction rolls back:
   * nothing it wrote remains and the key is free for a retry.
   */
  run(pool: ConnectionPool, request: IdempotentRequest, operation: IdempotentOperation): Promise<IdempotentResult>;
}
