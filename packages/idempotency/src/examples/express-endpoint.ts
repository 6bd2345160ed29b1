import { createIdempotency, expressIdempotency } from '@ferry/idempotency';
import { createPublisher } from '@ferry/publisher';
import express, { type Request } from 'express';
import pg from 'pg';

const pool = new pg.Pool({ connectionString: process.env.FERRY_DATABASE_URL });
const keys = createIdempotency({ scope: 'orders-api', retention: '24h' });
const publisher = createPublisher({ source: 'orders-api' });
const placeOrder = expressIdempotency<Request>(keys, {
  pool,
  principal: (req) => req.get('x-user-id'), // the caller, as your auth gateway verified it: keys are per caller
  handler: async (req, tx) => {
    const { rows } = await tx.query('INSERT INTO orders (sku, qty) VALUES ($1, $2) RETURNING id', [req.body.sku, req.body.qty]);
    const order = { id: String(rows[0]?.id), ...req.body };
    await publisher.publish(tx, { subject: 'orders.placed', key: order.id, type: 'OrderPlaced', data: order });
    return { status: 201, body: order }; // stored with the key, in the same transaction
  },
});
export const app = express().post('/orders', express.json(), placeOrder);
