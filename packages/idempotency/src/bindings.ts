import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ConnectionPool, PooledConnection } from '@ferry/core';
import { describeValue, ERROR_CODES, FerryError, readBounded, ValidationError } from '@ferry/core';
import { HTTP_HEADERS, type HttpReply, handleIdempotentRequest } from './http.js';
import type { Idempotency, OperationResult } from './types.js';

/** Node lower-cases header names. */
const KEY_HEADER = HTTP_HEADERS.idempotencyKey.toLowerCase();
const CONTENT_TYPE_HEADER = HTTP_HEADERS.contentType.toLowerCase();
const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;

/**
 * Options every binding takes. Keys are scoped per caller: pass `principal`,
 * or `globalKeys: true` if every caller may share them; one of the two is
 * required.
 *
 * @example
 * nodeHttpIdempotency(keys, { pool, principal: (req) => sessionOf(req)?.userId, handler });
 */
export interface BindingOptions<Req> {
  pool: ConnectionPool;
  /** Answer 400 when `Idempotency-Key` is missing (default true). */
  required?: boolean;
  /**
   * Who is asking: the authenticated user or tenant id, read from what your
   * authentication established (a verified session or token), never from a
   * header the client can set freely. Part of the key: a key is only ever
   * one caller's, so another caller's request with the same key runs as its
   * own request and never gets this caller's answer (nor a 422). A request
   * with a key for which it returns `undefined`, `null` or `''` is answered
   * 401, never treated as global.
   */
  principal?: (req: Req) => string | null | undefined;
  /**
   * `true`: keys are shared by every caller, and a stored answer is replayed
   * to whoever sends its key and request. Only for an API with a single
   * client, or whose keys already carry the caller. Default `false`.
   */
  globalKeys?: boolean;
  /** The endpoint: its writes (and outbox events) go through `tx`; its answer is stored and replayed. */
  handler: (req: Req, tx: PooledConnection) => Promise<OperationResult>;
}

function checkBinding(keys: Idempotency, options: BindingOptions<never>, who: string): void {
  if (typeof keys?.run !== 'function')
    throw new ValidationError('keys', `${who} needs the store from createIdempotency() as its first argument`);
  if (typeof options !== 'object' || options === null || typeof options.pool?.connect !== 'function') {
    throw new ValidationError('pool', `${who} needs { pool, handler } with a pg.Pool`);
  }
  if (typeof options.handler !== 'function') {
    throw new ValidationError(
      'handler',
      `${who} needs handler: async (req, tx) => ({ status, body }), got ${describeValue(options.handler)}`,
    );
  }
  const { principal, globalKeys } = options;
  if (globalKeys !== undefined && typeof globalKeys !== 'boolean') {
    throw new ValidationError('globalKeys', `${who}: globalKeys must be true or false, got ${describeValue(globalKeys)}`);
  }
  if (principal !== undefined && typeof principal !== 'function') {
    throw new ValidationError(
      'principal',
      `${who}: principal must be a function (req) => the authenticated caller's id, got ${describeValue(principal)}`,
    );
  }
  if (principal !== undefined && globalKeys) {
    throw new ValidationError(
      'principal',
      `${who} got both principal and globalKeys: true; keys are either scoped per caller or shared by all: pass one`,
    );
  }
  if (principal === undefined && !globalKeys) {
    // Refused here rather than per request: a binding without either would answer every request 401.
    throw new ValidationError(
      'principal',
      `${who} needs principal: (req) => the authenticated user or tenant id, because idempotency keys are scoped per caller (a stored answer is never replayed to another caller); if every caller may share keys (one trusted client), pass globalKeys: true instead`,
    );
  }
}

/** Every `Idempotency-Key` field line: `headersDistinct` keeps them apart, where `headers` joins them into `a1, a2`. */
function keyHeaderOf(req: {
  headers: Record<string, string | string[] | undefined>;
  headersDistinct?: Record<string, string[] | undefined>;
}): string | readonly string[] | undefined {
  return req.headersDistinct?.[KEY_HEADER] ?? req.headers[KEY_HEADER];
}

function contentTypeOf(req: { headers: Record<string, string | string[] | undefined> }): string | undefined {
  const value = req.headers[CONTENT_TYPE_HEADER];
  return Array.isArray(value) ? value.join(', ') : value;
}

/** What the edge needs about who is asking, from the binding's options. */
function callerOf<Req>(options: BindingOptions<Req>, req: Req): { principal: string | null | undefined } {
  return { principal: options.globalKeys ? undefined : options.principal?.(req) };
}

/** Writes a reply on a Node response (Express's `res` is one). */
export function writeReply(res: ServerResponse, reply: HttpReply): void {
  res.statusCode = reply.status;
  for (const [name, value] of Object.entries(reply.headers)) res.setHeader(name, value);
  res.end(reply.body);
}

// ---------------------------------------------------------------- bodies

/** A request body the binding cannot read; answered as problem+json with `status`, never thrown to the caller. */
class BodyError extends FerryError {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(ERROR_CODES.invalid, message);
    this.name = 'BodyError';
  }
}

interface ReadBody {
  /** The exact bytes, for the fingerprint; `undefined` when empty. */
  readonly bytes: Buffer | undefined;
  /** What the handler gets: parsed JSON for a JSON content type, the bytes otherwise, `undefined` when empty. */
  readonly parsed: unknown;
}

async function readBody(req: AsyncIterable<unknown>, contentType: string | undefined, maxBytes: number): Promise<ReadBody> {
  const bytes = await readBounded(req, maxBytes, () => new BodyError(413, `request body exceeds ${maxBytes} bytes`));
  if (bytes.length === 0) return { bytes: undefined, parsed: undefined };
  if (/^application\/([a-z0-9.+-]+\+)?json\b/i.test(contentType ?? '')) {
    try {
      return { bytes, parsed: JSON.parse(bytes.toString('utf8')) };
    } catch {
      throw new BodyError(400, 'request body is not valid JSON');
    }
  }
  return { bytes, parsed: bytes };
}

function problemJson(res: ServerResponse, status: number, title: string): void {
  writeReply(res, {
    status,
    headers: { [HTTP_HEADERS.contentType]: 'application/problem+json' },
    body: Buffer.from(JSON.stringify({ type: 'about:blank', title, status })),
    replayed: false,
  });
}

function checkMaxBodyBytes(value: unknown): number {
  const maxBodyBytes = value ?? DEFAULT_MAX_BODY_BYTES;
  if (typeof maxBodyBytes !== 'number' || !Number.isInteger(maxBodyBytes) || maxBodyBytes < 1) {
    throw new ValidationError('maxBodyBytes', `maxBodyBytes must be a positive integer, got ${describeValue(maxBodyBytes)}`);
  }
  return maxBodyBytes;
}

// ---------------------------------------------------------------- Express

/** The parts of an Express request the binding reads. */
export interface ExpressLikeRequest {
  method: string;
  originalUrl: string;
  body?: unknown;
  headers: Record<string, string | string[] | undefined>;
  /** Node's per-field-line headers: two `Idempotency-Key` lines stay two (and get a 400). */
  headersDistinct?: Record<string, string[] | undefined>;
}

/** Options of `expressIdempotency`. */
export interface ExpressBindingOptions<Req> extends BindingOptions<Req> {
  /** Largest request body the binding reads itself, when no body parser ran before it (default 1 MiB); a larger one gets 413. */
  maxBodyBytes?: number;
}

/** An Express request whose body no parser has read: the binding reads it (a Node request is an async iterable). */
function unreadBody(req: ExpressLikeRequest): AsyncIterable<unknown> | undefined {
  const stream = req as ExpressLikeRequest & { readableEnded?: boolean; _body?: boolean; [Symbol.asyncIterator]?: unknown };
  if (req.body !== undefined || stream._body === true || stream.readableEnded !== false) return undefined;
  return typeof stream[Symbol.asyncIterator] === 'function' ? (stream as unknown as AsyncIterable<unknown>) : undefined;
}

/**
 * An Express route handler that runs `handler` once per caller and
 * `Idempotency-Key`. Behind `express.json()` (or another parser) the
 * fingerprint covers the parsed body and its content type; with no parser
 * before it, the binding reads the body itself, fingerprints its exact bytes
 * and sets `req.body` (parsed JSON for a JSON content type, else the bytes).
 *
 * @example
 * app.post('/orders', express.json(), expressIdempotency(keys, { pool, principal: (req) => req.user?.id, handler: async (req, tx) => ({ status: 201, body: {} }) }));
 */
export function expressIdempotency<Req extends ExpressLikeRequest>(
  keys: Idempotency,
  options: ExpressBindingOptions<Req>,
): (req: Req, res: ServerResponse, next: (err?: unknown) => void) => Promise<void> {
  checkBinding(keys, options as BindingOptions<never>, 'expressIdempotency');
  const maxBodyBytes = checkMaxBodyBytes(options.maxBodyBytes);
  const { pool, required, globalKeys, handler } = options;
  return async (req, res, next) => {
    try {
      const contentType = contentTypeOf(req);
      let fingerprintBody = req.body;
      const unread = unreadBody(req);
      if (unread) {
        const body = await readBody(unread, contentType, maxBodyBytes);
        req.body = body.parsed;
        fingerprintBody = body.bytes;
      }
      const reply = await handleIdempotentRequest(
        keys,
        { pool, ...(required === undefined ? {} : { required }), ...(globalKeys === undefined ? {} : { globalKeys }) },
        {
          method: req.method,
          path: req.originalUrl,
          keyHeader: keyHeaderOf(req),
          contentType,
          body: fingerprintBody,
          ...callerOf(options, req),
        },
        (tx) => handler(req, tx),
      );
      writeReply(res, reply);
    } catch (err) {
      if (err instanceof BodyError) return problemJson(res, err.status, err.message);
      next(err);
    }
  };
}

// ---------------------------------------------------------------- Fastify

/** The parts of a Fastify request the binding reads. */
export interface FastifyLikeRequest {
  method: string;
  url: string;
  headers: Record<string, string | string[] | undefined>;
  body?: unknown;
  /** The Node request underneath: its `headersDistinct` keeps two `Idempotency-Key` lines apart. */
  raw?: { headersDistinct?: Record<string, string[] | undefined> };
}

/** The parts of a Fastify reply the binding writes. */
export interface FastifyLikeReply {
  code(statusCode: number): unknown;
  header(name: string, value: string): unknown;
  send(payload?: unknown): unknown;
}

/**
 * A Fastify route handler that runs `handler` once per caller and
 * `Idempotency-Key`; the fingerprint covers Fastify's parsed body and its
 * content type. Other errors propagate to Fastify's error handler.
 *
 * @example
 * app.post('/orders', fastifyIdempotency(keys, { pool, principal: (request) => request.user?.id, handler: async (request, tx) => ({ status: 201, body: {} }) }));
 */
export function fastifyIdempotency<Req extends FastifyLikeRequest, Rep extends FastifyLikeReply>(
  keys: Idempotency,
  options: BindingOptions<Req>,
): (request: Req, reply: Rep) => Promise<Rep> {
  checkBinding(keys, options as BindingOptions<never>, 'fastifyIdempotency');
  const { pool, required, globalKeys, handler } = options;
  return async (request, reply) => {
    const out = await handleIdempotentRequest(
      keys,
      { pool, ...(required === undefined ? {} : { required }), ...(globalKeys === undefined ? {} : { globalKeys }) },
      {
        method: request.method,
        path: request.url,
        keyHeader: keyHeaderOf({
          headers: request.headers,
          ...(request.raw?.headersDistinct ? { headersDistinct: request.raw.headersDistinct } : {}),
        }),
        contentType: contentTypeOf(request),
        body: request.body,
        ...callerOf(options, request),
      },
      (tx) => handler(request, tx),
    );
    reply.code(out.status);
    for (const [name, value] of Object.entries(out.headers)) reply.header(name, value);
    reply.send(out.body);
    return reply;
  };
}

// ---------------------------------------------------------------- node:http

export interface NodeHttpBindingOptions extends Omit<BindingOptions<IncomingMessage>, 'handler'> {
  /** Largest request body read (default 1 MiB); a larger one gets 413. */
  maxBodyBytes?: number;
  /** `body` is the parsed JSON (for a JSON content type), the raw bytes otherwise, `undefined` when empty. */
  handler: (req: IncomingMessage, tx: PooledConnection, body: unknown) => Promise<OperationResult>;
}

/**
 * A `node:http` request listener that runs `handler` once per caller and
 * `Idempotency-Key`. Reads (and for JSON, parses) the body itself and
 * fingerprints its exact bytes; any other error is logged and answered 500
 * without details.
 *
 * @example
 * http.createServer(nodeHttpIdempotency(keys, { pool, principal: (req) => sessionOf(req)?.userId, handler: async (req, tx, body) => ({ status: 201, body: {} }) }));
 */
export function nodeHttpIdempotency(
  keys: Idempotency,
  options: NodeHttpBindingOptions,
): (req: IncomingMessage, res: ServerResponse) => void {
  checkBinding(keys, options as unknown as BindingOptions<never>, 'nodeHttpIdempotency');
  const { pool, required, globalKeys, handler } = options;
  const maxBodyBytes = checkMaxBodyBytes(options.maxBodyBytes);
  const { logger } = keys.options;
  return (req, res) => {
    void (async () => {
      try {
        const contentType = contentTypeOf(req);
        const body = await readBody(req, contentType, maxBodyBytes);
        const reply = await handleIdempotentRequest(
          keys,
          { pool, ...(required === undefined ? {} : { required }), ...(globalKeys === undefined ? {} : { globalKeys }) },
          {
            method: req.method ?? 'GET',
            path: req.url ?? '/',
            keyHeader: keyHeaderOf(req),
            contentType,
            body: body.bytes,
            ...callerOf(options as unknown as BindingOptions<IncomingMessage>, req),
          },
          (tx) => handler(req, tx, body.parsed),
        );
        writeReply(res, reply);
      } catch (err) {
        if (err instanceof BodyError) return problemJson(res, err.status, err.message);
        logger.error({ event: 'idempotency:handler:error', err, method: req.method, path: req.url }, 'request failed');
        if (!res.headersSent) problemJson(res, 500, 'Internal Server Error');
        else res.destroy();
      }
    })();
  };
}
