// A chaos-run inbox consumer, run as a child process by chaos.ts. Its handler
// records one effects row per applied event in the message's transaction.
// Every report other than `applied` is printed as one JSON line on stdout
// (the parent counts duplicates, stale copies, gaps and parks across restarts).
import { quoteIdentifier } from '@ferry/core';
import { createInbox } from '@ferry/inbox';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';

export interface ChaosConsumerConfig {
  databaseUrl: string;
  natsUrl: string;
  schema: string;
  bossSchema: string;
  stream: string;
  consumer: string;
  applicationName: string;
}

const config = JSON.parse(process.argv[2] ?? '{}') as ChaosConsumerConfig;
const s = quoteIdentifier(config.schema);
const pool = new pg.Pool({ connectionString: config.databaseUrl, max: 12, application_name: config.applicationName });
pool.on('error', () => {}); // a terminated idle connection is replaced by the pool
const nc = await connect({
  servers: config.natsUrl,
  name: config.applicationName,
  maxReconnectAttempts: -1,
  reconnectTimeWait: 250,
  waitOnFirstConnect: true,
});
const inbox = createInbox<{ Set: unknown }>({
  pool,
  nc,
  stream: config.stream,
  consumer: config.consumer,
  schema: config.schema,
  bossSchema: config.bossSchema,
  mode: 'sequential',
  concurrency: 32,
  ackWaitMs: 3000,
  gapTimeoutMs: 600_000,
  gapRetryMs: 100,
  maxDeliver: 100,
  backoffMs: [100, 500, 1000],
  onEvent: (r) => {
    if (r.kind === 'applied') return;
    process.stdout.write(`${JSON.stringify({ kind: r.kind, key: r.key, version: 'version' in r ? r.version.toString() : undefined })}\n`);
  },
  handlers: {
    Set: async (event, { tx }) => {
      await tx.query(`INSERT INTO ${s}.effects (id, key, version) VALUES ($1, $2, $3)`, [event.id, event.key, event.version.toString()]);
    },
  },
});
await inbox.start();
process.stdout.write(`${JSON.stringify({ kind: 'started' })}\n`);
process.on('SIGTERM', () => {
  void inbox
    .stop()
    .then(() => nc.close())
    .then(() => pool.end())
    .finally(() => process.exit(0));
});
