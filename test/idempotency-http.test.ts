import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { type PooledConnection, quoteIdentifier } from '@ferry/core';
import { createIdempotency, expressIdempotency, fastifyIdempotency, nodeHttpIdempotency, type OperationResult } from '@ferry/idempotency';
import { createTestDatabase, type TestDatabase } from '@ferry/testkit';
import express, { type Request } from 'express';
import Fastify, { type FastifyInstance } from 'fastify';
// The examples are no longer a package export (they open resources on import): load the compiled file.
import type * as ClientRetry from '../packages/idempotency/dist/examples/client-retry.js';

const { createRetryPolicy, placeOrder }: typeof ClientRetry = await import(
  new URL('../../packages/idempotency/dist/examples/client-retry.js', import.meta.url).href
);

let db: TestDatabase;
let s: string;
const servers: Array<() => Promise<void>> = [];

before(async () => {
  db = await createTestDatabase({ prefix: 'idem_http', migrate: ['idempotency'], max: 10 });
  s = quoteIdentifier(db.schema);
  await db.pool.query(`CREATE TABLE ${s}.orders (id serial PRIMARY KEY, api text NOT NULL, sku text NOT NULL)`);
});
after(async () => {
  for (const close of servers) await close().catch(() => {});
  await db?.close();
});

/** The endpoint every binding wraps: one order row per execution. */
function createOrder(api: string) {
  return async (tx: PooledConnection, body: unknown): Promise<OperationResult> => {
    const { sku, slowMs } = body as { sku: string; slowMs?: number };
    const { rows } = await tx.query<{ id: number }>(`INSERT INTO ${s}.orders (api, sku) VALUES ($1, $2) RETURNING id`, [api, sku]);
    if (slowMs) await sleep(slowMs);
    return { status: 201, body: { id: rows[0]?.id, sku }, headers: { Location: `/orders/${rows[0]?.id}` } };
  };
}

async function listen(server: Server): Promise<string> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  servers.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const keysFor = (api: string) => createIdempotency({ schema: db.schema, scope: api, onConcurrent: 'reject' });

async function post(base: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${base}/orders`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-user-id': 'user-1', ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

const orders = async (api: string) =>
  (await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${s}.orders WHERE api = $1`, [api])).rows[0]?.n;

/** The IETF draft's behaviour, over real HTTP, for one binding. */
async function exercise(base: string, api: string): Promise<void> {
  const first = await post(base, { sku: 'a' }, { 'idempotency-key': 'k1' });
  assert.equal(first.status, 201);
  assert.equal(first.headers.get('idempotent-replayed'), null);
  assert.match(first.headers.get('content-type') ?? '', /^application\/json/);
  const again = await post(base, { sku: 'a' }, { 'idempotency-key': 'k1' });
  assert.equal(again.status, 201);
  assert.equal(again.headers.get('idempotent-replayed'), 'true');
  assert.equal(again.text, first.text, 'the replay is byte-identical');
  assert.equal(again.headers.get('location'), first.headers.get('location'));
  // The draft's structured-field form names the same key.
  assert.equal((await post(base, { sku: 'a' }, { 'idempotency-key': '"k1"' })).headers.get('idempotent-replayed'), 'true');

  const reused = await post(base, { sku: 'b' }, { 'idempotency-key': 'k1' });
  assert.equal(reused.status, 422);
  assert.match(reused.headers.get('content-type') ?? '', /^application\/problem\+json/);
  assert.match(JSON.parse(reused.text).detail, /"k1"/);
  // Keys are per caller: another principal's k1 is another key, which runs (idempotency-callers.test.ts has the rest).
  const other = await post(base, { sku: 'a' }, { 'idempotency-key': 'k1', 'x-user-id': 'user-2' });
  assert.equal(other.status, 201, 'another principal');
  assert.equal(other.headers.get('idempotent-replayed'), null);

  assert.equal((await post(base, { sku: 'c' })).status, 400, 'missing key');
  assert.equal((await post(base, { sku: 'c' }, { 'idempotency-key': 'x'.repeat(256) })).status, 400, 'over-long key');
  assert.equal((await post(base, { sku: 'c' }, { 'idempotency-key': '""' })).status, 400, 'empty key');

  const slow = post(base, { sku: 'slow', slowMs: 800 }, { 'idempotency-key': 'k2' });
  await sleep(200);
  const busy = await post(base, { sku: 'slow', slowMs: 800 }, { 'idempotency-key': 'k2' });
  assert.equal(busy.status, 409);
  assert.equal(busy.headers.get('retry-after'), '1');
  assert.equal((await slow).status, 201);

  assert.equal(await orders(api), 3, 'k1 and k2 each ran once for user-1, k1 once for user-2');
}

describe('idempotency - HTTP bindings', () => {
  test('idempotency - the Express binding replays with Idempotent-Replayed and answers 400, 409 and 422 as the draft says', async () => {
    const app = express().post(
      '/orders',
      express.json(),
      expressIdempotency<Request>(keysFor('express'), {
        pool: db.pool,
        principal: (req) => req.get('x-user-id'),
        handler: (req, tx) => createOrder('express')(tx, req.body),
      }),
    );
    await exercise(await listen(createServer(app)), 'express');
  });

  test('idempotency - the Fastify binding replays with Idempotent-Replayed and answers 400, 409 and 422 as the draft says', async () => {
    const app: FastifyInstance = Fastify();
    app.post(
      '/orders',
      fastifyIdempotency(keysFor('fastify'), {
        pool: db.pool,
        principal: (request) => request.headers['x-user-id'] as string | undefined,
        handler: (request, tx) => createOrder('fastify')(tx, request.body),
      }),
    );
    await app.listen({ port: 0, host: '127.0.0.1' });
    servers.push(() => app.close());
    await exercise(`http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, 'fastify');
  });

  test('idempotency - the node:http binding replays with Idempotent-Replayed and answers 400, 409 and 422 as the draft says', async () => {
    const server = createServer(
      nodeHttpIdempotency(keysFor('node'), {
        pool: db.pool,
        principal: (req) => req.headers['x-user-id'] as string | undefined,
        handler: (_req, tx, body) => createOrder('node')(tx, body),
      }),
    );
    await exercise(await listen(server), 'node');
  });

  test('idempotency - a response lost after the effect committed is recovered by the client retry without a second effect', async () => {
    let attempts = 0;
    let executions = 0;
    const app = express().post(
      '/orders',
      (req, res, next) => {
        attempts++;
        if (attempts === 1) {
          // Inject the failure: the operation commits, then the connection drops before the answer is written.
          res.end = (() => {
            req.socket.destroy();
            return res;
          }) as typeof res.end;
        }
        next();
      },
      express.json(),
      expressIdempotency<Request>(createIdempotency({ schema: db.schema, scope: 'lost-response' }), {
        pool: db.pool,
        globalKeys: true, // the documented client sends no credentials
        handler: async (req, tx) => {
          executions++;
          return createOrder('lost-response')(tx, req.body);
        },
      }),
    );
    const base = await listen(createServer(app));
    // The documented client: one key for the logical operation, cockatiel retries on the network error.
    const answer = await placeOrder(base, { sku: 'lost', qty: 1 }, createRetryPolicy({ retries: 3, initialDelayMs: 20, maxDelayMs: 200 }));
    assert.equal(answer.status, 201);
    assert.equal(answer.replayed, true, 'the retry got the stored answer');
    assert.equal((answer.body as { sku: string }).sku, 'lost');
    assert.equal(attempts, 2);
    assert.equal(executions, 1);
    assert.equal(await orders('lost-response'), 1);
  });

  test('idempotency - the documented client retries 409 and 5xx but never another 4xx', async () => {
    let hits = 0;
    const statuses = [503, 409, 201];
    const base = await listen(
      createServer((_req, res) => {
        const status = statuses[hits++] ?? 500;
        res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify({ status }));
      }),
    );
    const policy = createRetryPolicy({ retries: 4, initialDelayMs: 5, maxDelayMs: 20 });
    assert.equal((await placeOrder(base, { sku: 'x', qty: 1 }, policy)).status, 201);
    assert.equal(hits, 3);
    statuses.splice(0, 3, 422, 201);
    hits = 0;
    assert.equal((await placeOrder(base, { sku: 'x', qty: 1 }, policy)).status, 422);
    assert.equal(hits, 1, 'a 4xx other than 409 is final');
  });
});
