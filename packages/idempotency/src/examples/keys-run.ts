import { randomUUID } from 'node:crypto';
import { createIdempotency, type RequestFingerprint } from '@ferry/idempotency';
import { createPublisher } from '@ferry/publisher';
import type pg from 'pg';

const keys = createIdempotency({
  schema: 'ferry', // where `ferry migrate --idempotency` ran (default)
  scope: 'orders-api', // namespace of the keys (default 'default')
  retention: '24h', // '90m', '24h', '7d' or ms; default 24h, never below 1h
  onConcurrent: 'wait', // or 'reject' (see "Concurrent duplicates")
  waitMs: 10_000, // how long a duplicate waits in 'wait' mode
  storeClientErrors: true, // store and replay 4xx answers (default)
});
const publisher = createPublisher({ source: 'orders-api' });

// userId: the authenticated caller. Keys are per caller: another user's request with this key is theirs, not a replay.
// fingerprint: { method, path (with query), contentType, body: the exact bytes (or the parsed body) }.
export async function placeOrder(pool: pg.Pool, key: string, userId: string, fingerprint: RequestFingerprint, sku: string) {
  const result = await keys.run(pool, { key, principal: userId, fingerprint }, async (tx) => {
    const id = randomUUID();
    await tx.query('INSERT INTO orders (id, sku) VALUES ($1, $2)', [id, sku]);
    await publisher.publish(tx, { subject: 'orders.placed', key: id, type: 'OrderPlaced', data: { id, sku } });
    return { status: 201, body: { id, sku }, headers: { Location: `/orders/${id}` } };
  });
  return result; // { status, body, headers, replayed }: replayed is true when the operation did not run
}
