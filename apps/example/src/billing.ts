import { bossSchemaFor, quoteIdentifier } from '@ferry/core';
import { createInbox, type Inbox } from '@ferry/inbox';
import type { NatsConnection } from '@nats-io/transport-node';
import type pg from 'pg';
import { PgBoss } from 'pg-boss';
import { contracts } from './contracts.js';

export const RECEIPT_QUEUE = 'demo-receipt-email';

export interface Billing {
  inbox: Inbox;
  boss: PgBoss;
  /** Orders whose event was published at OrderPlaced v1 and upcast to v2 before the handler. */
  upcast: Set<string>;
  stop(): Promise<void>;
}

/**
 * The billing consumer: charges each order exactly once through the inbox,
 * and enqueues the receipt email in the same transaction as the charge, so
 * the email job exists iff the charge committed.
 */
export async function startBilling(opts: {
  pool: pg.Pool;
  databaseUrl: string;
  nc: NatsConnection;
  stream: string;
  schema: string;
  log: (line: string) => void;
}): Promise<Billing> {
  const s = quoteIdentifier(opts.schema);
  const boss = new PgBoss({ connectionString: opts.databaseUrl, schema: bossSchemaFor(opts.schema), max: 4 });
  boss.on('error', (err) => opts.log(`pg-boss: ${err.message}`));
  await boss.start();
  await boss.createQueue(RECEIPT_QUEUE);
  await boss.work<{ orderId: string; customer: string; totalCents: number }>(
    RECEIPT_QUEUE,
    { pollingIntervalSeconds: 0.5, batchSize: 50 },
    async (jobs) => {
      for (const job of jobs) {
        // "Sending" is logging; recording it lets the summary count emails.
        await opts.pool.query(`INSERT INTO ${s}.emails (order_id, job_id) VALUES ($1, $2) ON CONFLICT (job_id) DO NOTHING`, [
          job.data.orderId,
          job.id,
        ]);
      }
    },
  );
  const upcast = new Set<string>();
  const inbox = createInbox({
    pool: opts.pool,
    nc: opts.nc,
    stream: opts.stream,
    consumer: 'billing',
    schema: opts.schema,
    mode: 'latest',
    concurrency: 16,
    boss,
    // Each event is checked against the contract it was published under and upcast to v2, the
    // registry's newest: the handler sees only v2. One that does not fit is parked (invalid-data).
    contracts,
    handlers: {
      OrderPlaced: async (event, ctx) => {
        const { orderId, customer, total } = event.payload;
        const totalCents = total.amountCents;
        if (event.contract?.publishedVersion === 1) upcast.add(orderId);
        await ctx.tx.query(`INSERT INTO ${s}.charges (order_id, customer, amount_cents) VALUES ($1, $2, $3)`, [
          orderId,
          customer,
          totalCents,
        ]);
        await ctx.boss.send(RECEIPT_QUEUE, { orderId, customer, totalCents });
      },
    },
  });
  await inbox.start();
  return {
    inbox,
    boss,
    upcast,
    async stop() {
      await inbox.stop();
      await boss.stop({ graceful: true, timeout: 5_000 });
    },
  };
}
