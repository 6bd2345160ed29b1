import { createServer } from 'node:http';
import { createInbox } from '@ferry/inbox';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';
import { collectDefaultMetrics, Registry } from 'prom-client';

// One registry for the whole service: the inbox's ferry_inbox_* metrics beside your own.
const registry = new Registry();
collectDefaultMetrics({ register: registry });

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
const nc = await connect({ servers: process.env.NATS_URL });
const inbox = createInbox({
  pool,
  nc,
  stream: 'ORDERS',
  consumer: 'billing',
  metrics: registry, // every series labelled consumer="billing"
  lagSampleIntervalMs: 5_000, // how often num_pending / num_ack_pending are read from JetStream
  handlers: {
    OrderPlaced: async (event, { tx }) => {
      await tx.query('INSERT INTO invoices (order_id) VALUES ($1)', [event.key]);
    },
  },
});
await inbox.start();

createServer(async (req, res) => {
  if (req.url !== '/metrics') return void res.writeHead(404).end();
  res.writeHead(200, { 'content-type': registry.contentType }).end(await registry.metrics());
}).listen(9465);
