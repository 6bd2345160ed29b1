import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { quoteIdentifier } from '@ferry/core';
import { createIdempotency, nodeHttpIdempotency } from '@ferry/idempotency';
import { createPublisher } from '@ferry/publisher';
import type pg from 'pg';
import { contracts } from './contracts.js';

export interface OrderRequest {
  customer: string;
  totalCents: number;
  /** Demo only: the service takes this long before answering, so a client timeout hits after the order committed. */
  slowMs?: number;
  /** Demo only: publish this order's event as OrderPlaced v1, as the service's previous release did. */
  legacyEvent?: boolean;
}

/**
 * The demo's API tokens and the caller each one authenticates. A real service
 * verifies a session or a signed token here; what matters to idempotency is
 * that the principal comes from that verification, not from the client's say-so.
 */
export const DEMO_TOKENS: ReadonlyMap<string, string> = new Map([['demo-storefront-token', 'storefront']]);

/** The authenticated caller of a request, or `undefined` (answered 401 when it carries an Idempotency-Key). */
function callerOf(authorization: string | undefined): string | undefined {
  const token = /^Bearer (\S+)$/.exec(authorization ?? '')?.[1];
  return token === undefined ? undefined : DEMO_TOKENS.get(token);
}

/**
 * The orders service: `POST /orders` with an `Idempotency-Key` creates an
 * order and publishes `OrderPlaced` in the same transaction as the key record,
 * so a retried request creates nothing twice and gets the stored answer.
 */
export async function startOrdersService(pool: pg.Pool, schema: string): Promise<{ url: string; server: Server }> {
  const s = quoteIdentifier(schema);
  // Typed and checked by the contracts: a publish whose data does not fit OrderPlaced v2 throws before anything is written.
  const publisher = createPublisher({ schema, source: 'orders-service', contracts });
  const keys = createIdempotency({ schema, scope: 'orders-api', retention: '24h' });
  const handle = nodeHttpIdempotency(keys, {
    pool,
    required: true,
    // Keys are scoped per caller: one caller's key never answers, or blocks, another's request.
    principal: (req) => callerOf(req.headers.authorization),
    handler: async (req, tx, body) => {
      if (req.method !== 'POST' || req.url !== '/orders') return { status: 404, body: { error: 'not found' } };
      const order = body as OrderRequest;
      if (typeof order?.customer !== 'string' || !Number.isInteger(order.totalCents) || order.totalCents <= 0) {
        return { status: 400, body: { error: 'customer (string) and totalCents (positive integer) are required' } };
      }
      const orderId = randomUUID();
      await tx.query(`INSERT INTO ${s}.orders (id, customer, total_cents) VALUES ($1, $2, $3)`, [
        orderId,
        order.customer,
        order.totalCents,
      ]);
      // The subject comes from the contract; the event is stamped ce-dataschema ferry:OrderPlaced/v2.
      if (order.legacyEvent) {
        await publisher.publish(tx, {
          key: orderId,
          type: 'OrderPlaced',
          contractVersion: 1,
          data: { orderId, customer: order.customer, totalCents: order.totalCents },
        });
      } else {
        await publisher.publish(tx, {
          key: orderId,
          type: 'OrderPlaced',
          data: { orderId, customer: order.customer, total: { amountCents: order.totalCents, currency: 'EUR' } },
        });
      }
      if (order.slowMs) await sleep(order.slowMs);
      return { status: 201, body: { orderId } };
    },
  });
  const server = createServer(handle);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}
