import { type ConnectionPool, withTransaction } from '@ferry/core';
import { encodeBody } from './body.js';
import { IdempotencyConflictError, IdempotencyInProgressError, IdempotencyKeyError, IdempotencyPrincipalError } from './errors.js';
import { parseIdempotencyKeyHeader, validateIdempotencyKey } from './key.js';
import type { Idempotency, IdempotentOperation, OperationResult } from './types.js';

/** The header names of the IETF `Idempotency-Key` draft, in one place. */
export const HTTP_HEADERS = {
  idempotencyKey: 'Idempotency-Key',
  replayed: 'Idempotent-Replayed',
  retryAfter: 'Retry-After',
  contentType: 'Content-Type',
} as const;

/** HTTP status per error, as the IETF draft asks. */
export const HTTP_STATUS = {
  /** Missing (where required), malformed or repeated key. */
  badKey: 400,
  /** A key but no principal (the caller), where keys are scoped per caller. */
  noPrincipal: 401,
  /** A request with the key is still running. */
  inProgress: 409,
  /** The key was used for a different request. */
  conflict: 422,
} as const;

/** A response ready to write: status, headers, body bytes. */
export interface HttpReply {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Buffer | undefined;
  /** True when the body is the stored answer of an earlier request. */
  readonly replayed: boolean;
}

/** The parts of an HTTP request the core needs; bindings build it from their framework's request. */
export interface EdgeRequest {
  method: string;
  /** The request target: path with query string. */
  path: string;
  /** Every `Idempotency-Key` field line (`req.headersDistinct`), `undefined` when absent. More than one is a 400. */
  keyHeader: string | readonly string[] | undefined;
  /** The `Content-Type` header, `undefined` when absent. */
  contentType?: string | undefined;
  /** The body for the fingerprint: its exact bytes when the binding has them, else the parsed value. */
  body: unknown;
  /** The authenticated caller; ignored with `globalKeys: true`. Empty or absent: 401. */
  principal?: string | null | undefined;
}

export interface EdgeOptions {
  pool: ConnectionPool;
  /** Answer 400 when the header is missing (default true). When false, a request without a key runs in a plain transaction. */
  required?: boolean;
  /** Keys are shared by every caller and `request.principal` is not read (default false: a key without a principal is a 401). */
  globalKeys?: boolean;
}

const DEFAULT_CONTENT_TYPE = {
  json: 'application/json; charset=utf-8',
  text: 'text/plain; charset=utf-8',
  bytes: 'application/octet-stream',
};

/** Serialises an operation's answer the same way for the first response and every replay. */
export function renderReply(result: OperationResult, replayed: boolean): HttpReply {
  const encoded = encodeBody(result.body);
  const headers: Record<string, string> = { ...(result.headers ?? {}) };
  const hasContentType = Object.keys(headers).some((h) => h.toLowerCase() === 'content-type');
  if (encoded.kind !== 'none' && !hasContentType) headers[HTTP_HEADERS.contentType] = DEFAULT_CONTENT_TYPE[encoded.kind];
  if (replayed) headers[HTTP_HEADERS.replayed] = 'true';
  return Object.freeze({ status: result.status, headers: Object.freeze(headers), body: encoded.bytes ?? undefined, replayed });
}

function problem(status: number, title: string, detail: string, extra: Record<string, string> = {}): HttpReply {
  const body = Buffer.from(JSON.stringify({ type: 'about:blank', title, status, detail }), 'utf8');
  return Object.freeze({
    status,
    headers: Object.freeze({ [HTTP_HEADERS.contentType]: 'application/problem+json', ...extra }),
    body,
    replayed: false,
  });
}

/**
 * The reply for one of the idempotency errors (400, 401, 409, 422 as
 * `application/problem+json`), or `undefined` for any other error, which the
 * framework's own error handling should answer.
 */
export function errorReply(err: unknown): HttpReply | undefined {
  if (err instanceof IdempotencyKeyError) return problem(HTTP_STATUS.badKey, 'Bad Idempotency-Key', err.message);
  if (err instanceof IdempotencyPrincipalError) {
    return problem(HTTP_STATUS.noPrincipal, 'Idempotency-Key without a caller', err.message);
  }
  if (err instanceof IdempotencyInProgressError) {
    return problem(HTTP_STATUS.inProgress, 'Request in progress', err.message, { [HTTP_HEADERS.retryAfter]: '1' });
  }
  if (err instanceof IdempotencyConflictError) return problem(HTTP_STATUS.conflict, 'Idempotency-Key reused', err.message);
  return undefined;
}

/**
 * The framework-agnostic edge: reads the key header, runs `operation` once
 * per key through `keys.run`, and returns the reply to write, idempotency
 * errors included. Any other error (the operation threw) is rethrown for the
 * framework to answer (usually 500); the key is then free for a retry.
 */
export async function handleIdempotentRequest(
  keys: Idempotency,
  options: EdgeOptions,
  request: EdgeRequest,
  operation: IdempotentOperation,
): Promise<HttpReply> {
  let key: string | undefined;
  try {
    key = parseIdempotencyKeyHeader(request.keyHeader);
    if (key === undefined && (options.required ?? true)) validateIdempotencyKey(undefined);
  } catch (err) {
    const reply = errorReply(err);
    if (reply) return reply;
    throw err;
  }
  if (key === undefined) {
    // No key and none required: an ordinary transaction, nothing recorded.
    const result = await withTransaction(options.pool, operation);
    return renderReply(result, false);
  }
  try {
    const fingerprint = { method: request.method, path: request.path, contentType: request.contentType ?? null, body: request.body };
    const caller = options.globalKeys
      ? { globalKey: true }
      : // '' and null are "no principal" like undefined: run() refuses them (401), never treats them as global.
        { principal: request.principal ?? undefined };
    const result = await keys.run(options.pool, { key, ...caller, fingerprint }, operation);
    // A replayed body was decoded from storage; encoding it again yields the stored bytes.
    return renderReply(result, result.replayed);
  } catch (err) {
    const reply = errorReply(err);
    if (reply) return reply;
    throw err;
  }
}
