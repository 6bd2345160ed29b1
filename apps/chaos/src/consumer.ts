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
  /** How long a stored early version waits for its predecessor before it parks. */
  gapTimeoutMs: number;
  /** Keys with this prefix fail their version 1 until lateMs after a consumer first saw it (table late_seen): a late gap. */
  latePrefix: string;
  lateMs: number;
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
  // Short, so that redeliveries after a kill or a NATS restart, and the late keys' version 1, arrive
  // after their successors parked: the parking lot must still apply every key in order.
  gapTimeoutMs: config.gapTimeoutMs,
  parkPollIntervalMs: 500,
  parkRetryLimit: 6,
  gapRetryMs: 100,
  maxDeliver: 100,
  backoffMs: [100, 500, 1000],
  onEvent: (r) => {
    if (r.kind === 'applied') return;
    process.stdout.write(`${JSON.stringify({ kind: r.kind, key: r.key, version: 'version' in r ? r.version.toString() : undefined })}\n`);
  },
  handlers: {
    Set: async (event, { tx }) => {
      // A late gap: version 1 of a late key fails (from the stream, then from the parking lot) until lateMs
      // after either consumer first saw it, long after its successors waited gapTimeoutMs and parked.
      if (event.key.startsWith(config.latePrefix) && event.version === 1n) {
        // On the pool, not tx: the first sighting must outlive this attempt's rollback.
        const { rows } = await pool.query<{ ms: number }>(
          `WITH ins AS (INSERT INTO ${s}.late_seen (key) VALUES ($1) ON CONFLICT DO NOTHING RETURNING first_seen)
           SELECT (extract(epoch FROM clock_timestamp() - coalesce((SELECT first_seen FROM ins), (SELECT first_seen FROM ${s}.late_seen WHERE key = $1))) * 1000)::float8 AS ms`,
          [event.key],
        );
        if ((rows[0]?.ms ?? 0) < config.lateMs) throw new Error('late on purpose');
      }
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
