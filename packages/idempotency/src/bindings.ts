import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ConnectionPool, PooledConnection } from '@ferry/core';
import { describeValue, ERROR_CODES, FerryError, ValidationError } from '@ferry/core';
import { HTTP_HEADERS, type HttpReply, handleIdempotentRequest } from './http.js';
import type { Idempotency, OperationResult } from './types.js';

/** Node lower-cases header names. */
const KEY_HEADER = HTTP_HEADERS.idempotencyKey.toLowerCase();

/** Options every binding takes. */
export interface BindingOptions<Req> {
  pool: ConnectionPool;
  /** Answer 400 when `Idempotency-Key` is missing (default true). */
  required?: boolean;
  /** Who is asking (user or tenant id), part of the fingerprint: another principal's key is a 422, never their answer. */
  principal?: (req: Req) => string | null | undefined;
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
}

/** Writes a reply on a Node response (Express's `res` is one). */
export function writeReply(res: ServerResponse, reply: HttpReply): void {
  res.statusCode = reply.status;
  for (const [name, value] of Object.entries(reply.headers)) res.setHeader(name, value);
  res.end(reply.body);
}

// ---------------------------------------------------------------- Express

/** The parts of an Express request the binding reads (`express.json()` must have parsed the body). */
export interface ExpressLikeRequest {
  method: string;
  originalUrl: string;
  body?: unknown;
  headers: Record<string, string | string[] | undefined>;
}

/**
 * An Express route handler that runs `handler` once per `Idempotency-Key`.
 *
 * @example
 * app.post('/orders', express.json(), expressIdempotency(keys, { pool, handler: async (req, tx) => ({ status: 201, body: {} }) }));
 */
export function expressIdempotency<Req extends ExpressLikeRequest>(
  keys: Idempotency,
  options: BindingOptions<Req>,
): (req: Req, res: ServerResponse, next: (err?: unknown) => void) => Promise<void> {
  checkBinding(keys, options as BindingOptions<never>, 'expressIdempotency');
  const { pool, required, principal, handler } = options;
  return async (req, res, next) => {
    try {
      const reply = await handleIdempotentRequest(
        keys,
        { pool, ...(required === undefined ? {} : { required }) },
        {
          method: req.method,
          path: req.originalUrl,
          keyHeader: req.headers[KEY_HEADER],
          body: req.body,
          principal: principal?.(req),
        },
        (tx) => handler(req, tx),
      );
      writeReply(res, reply);
    } catch (err) {
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
}

/** The parts of a Fastify reply the binding writes. */
export interface FastifyLikeReply {
  code(statusCode: number): unknown;
  header(name: string, value: string): unknown;
  send(payload?: unknown): unknown;
}

/**
 * A Fastify route handler that runs `handler` once per `Idempotency-Key`.
 * Other errors propagate to Fastify's error handler.
 *
 * @example
 * app.post('/orders', fastifyIdempotency(keys, { pool, handler: async (request, tx) => ({ status: 201, body: {} }) }));
 */
export function fastifyIdempotency<Req extends FastifyLikeRequest, Rep extends FastifyLikeReply>(
  keys: Idempotency,
  options: BindingOptions<Req>,
): (request: Req, reply: Rep) => Promise<Rep> {
  checkBinding(keys, options as BindingOptions<never>, 'fastifyIdempotency');
  const { pool, required, principal, handler } = options;
  return async (request, reply) => {
    const out = await handleIdempotentRequest(
      keys,
      { pool, ...(required === undefined ? {} : { required }) },
      {
        method: request.method,
        path: request.url,
        keyHeader: request.headers[KEY_HEADER],
        body: request.body,
        principal: principal?.(request),
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

async function readBody(req: IncomingMessage, maxBytes: number): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > maxBytes) throw new BodyError(413, `request body exceeds ${maxBytes} bytes`);
    chunks.push(chunk as Buffer);
  }
  if (size === 0) return undefined;
  const bytes = Buffer.concat(chunks);
  if (/^application\/([a-z0-9.+-]+\+)?json\b/i.test(req.headers['content-type'] ?? '')) {
    try {
      return JSON.parse(bytes.toString('utf8'));
    } catch {
      throw new BodyError(400, 'request body is not valid JSON');
    }
  }
  return bytes;
}

function problemJson(res: ServerResponse, status: number, title: string): void {
  writeReply(res, {
    status,
    headers: { [HTTP_HEADERS.contentType]: 'application/problem+json' },
    body: Buffer.from(JSON.stringify({ type: 'about:blank', title, status })),
    replayed: false,
  });
}

/**
 * A `node:http` request listener that runs `handler` once per
 * `Idempotency-Key`. Reads (and for JSON, parses) the body itself; any other
 * error is logged and answered 500 without details.
 *
 * @example
 * http.createServer(nodeHttpIdempotency(keys, { pool, handler: async (req, tx, body) => ({ status: 201, body: {} }) }));
 */
export function nodeHttpIdempotency(
  keys: Idempotency,
  options: NodeHttpBindingOptions,
): (req: IncomingMessage, res: ServerResponse) => void {
  checkBinding(keys, options as unknown as BindingOptions<never>, 'nodeHttpIdempotency');
  const { pool, required, principal, handler } = options;
  const maxBodyBytes = options.maxBodyBytes ?? 1024 * 1024;
  if (!Number.isInteger(maxBodyBytes) || maxBodyBytes < 1) {
    throw new ValidationError('maxBodyBytes', `maxBodyBytes must be a positive integer, got ${describeValue(maxBodyBytes)}`);
  }
  const { logger } = keys.options;
  return (req, res) => {
    void (async () => {
      try {
        const body = await readBody(req, maxBodyBytes);
        const reply = await handleIdempotentRequest(
          keys,
          { pool, ...(required === undefined ? {} : { required }) },
          { method: req.method ?? 'GET', path: req.url ?? '/', keyHeader: req.headers[KEY_HEADER], body, principal: principal?.(req) },
          (tx) => handler(req, tx, body),
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
