import { createInbox, type Handlers } from '@ferry/inbox';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';

// State-carrying events: each one says what the order IS now, so only the newest matters.
type OrderEvents = { OrderStatusChanged: { orderId: string; status: string } };

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
const nc = await connect({ servers: process.env.NATS_URL });
const handlers = {
  OrderStatusChanged: async (event, { tx }) => {
    await tx.query('UPDATE order_view SET status = $2, version = $3 WHERE order_id = $1', [
      event.payload.orderId,
      event.payload.status,
      event.version.toString(),
    ]);
  },
} satisfies Handlers<OrderEvents>;
const inbox = createInbox<OrderEvents>({ pool, nc, stream: 'ORDERS', consumer: 'order-view', mode: 'latest', handlers });
await inbox.start();
