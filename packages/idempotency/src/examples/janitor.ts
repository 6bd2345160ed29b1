import { createIdempotencyJanitor } from '@ferry/idempotency';
import type pg from 'pg';

export async function startJanitor(pool: pg.Pool, databaseUrl: string) {
  const janitor = createIdempotencyJanitor({
    pool, // the database holding idempotency_keys
    connectionString: databaseUrl, // for the janitor's own pg-boss…
    bossSchema: 'ferry_idempotency_boss', // …in a schema of its own (this is the default, `<schema>_idempotency_boss`)
    // boss: myPgBoss, // or instead pass a pg-boss you already run
    cron: '*/5 * * * *', // default every 5 minutes (UTC)
    batchSize: 1000, // rows per DELETE
    maxBatchesPerRun: 100, // DELETEs per run; the next run carries on
  });
  await janitor.start(); // on shutdown: await janitor.stop()
  return janitor;
}
