/**
 * Migrating a large outbox under publish load: outbox migration 000004 (the
 * pending-key index) applied by `migrate()` to an outbox of `--rows` rows
 * (default 1,000,000, 1% unpublished) while `--writers` publishers commit one
 * event per transaction, against the same statements run the way releases
 * before issue 29 ran them (inside one transaction). Reports each way's
 * migration time and the publish transactions' latency during it: the
 * longest wait is what a request publishing an event would have felt.
 *
 * Since outbox migration 000015 the outbox has no `published_at` column, and
 * the index 000004 builds (on `published_at IS NULL`) is gone with it; a
 * database upgraded from version 3 or older still runs 000004 first, on an
 * outbox that has the column. So the outbox at version 3 is simulated on the
 * current schema: `published_at` is added back to the outbox (1% of the rows
 * NULL), with the (lane, seq) index on it, and 000004 unrecorded. The rest of
 * the schema is today's: each publish also inserts its outbox_pending row (the
 * trigger of 000015), and the rows published in the fill are moved to
 * outbox_published as the relay would have.
 *
 *   node bench/dist/migrate-under-load.js [--rows 1000000] [--writers 4]
 *
 * Not in the runner's scenarios: one run builds a million-row table twice
 * (about a minute of a 2-core machine); the figures are in
 * bench/results/migrate-under-load.json and docs/operations.md.
 */
import { migrate, quoteIdentifier, withTransaction } from '@ferry/core';
import { createTestDatabase } from '@ferry/testkit';
import { declareFlags, numArg, sleep } from './lib/args.js';
import { publishLoad } from './lib/publish-load.js';
import { writeResult } from './lib/stats.js';

declareFlags(
  'node bench/dist/migrate-under-load.js',
  'Outbox migration 000004 on a large outbox under publish load: concurrent (this release) against in a transaction (before issue 29); migration time and publish latency during it.',
  { rows: '<n> outbox rows (default 1000000, 1% unpublished)', writers: '<n> concurrent publishers (default 4)' },
);

const rows = numArg('rows', 1_000_000);
const writers = numArg('writers', 4);

const db = await createTestDatabase({ prefix: 'bench_miglock', max: writers + 4 });
const s = quoteIdentifier(db.schema);

/** The outbox's `published_at` of before outbox migration 000015, which 000004's index is on. */
async function withPublishedAt(): Promise<void> {
  await db.pool.query(`ALTER TABLE ${s}.outbox ADD COLUMN IF NOT EXISTS published_at timestamptz`);
}

/** The outbox as a release at version 3 had it: the (lane, seq) pending index, 000004 unrecorded. */
async function asVersion3(): Promise<void> {
  await db.pool.query(`DROP INDEX IF EXISTS ${s}.outbox_pending_key_idx`);
  await db.pool.query(`CREATE INDEX IF NOT EXISTS outbox_pending_lane_idx ON ${s}.outbox (lane, seq) WHERE published_at IS NULL`);
  await db.pool.query(`DELETE FROM ${s}.migrations WHERE migration_set = 'outbox' AND version = 4`);
  await db.pool.query(`VACUUM ANALYZE ${s}.outbox, ${s}.outbox_pending, ${s}.outbox_published`);
}

const round = (x: number) => Math.round(x * 10) / 10;

async function measure(apply: () => Promise<void>) {
  await asVersion3();
  const load = publishLoad(db.pool, db.schema, writers);
  await sleep(2_000);
  const from = performance.now();
  await apply();
  const to = performance.now();
  await sleep(1_000);
  return { migrationMs: Math.round(to - from), ...(await load.stop(from, to)) };
}

try {
  await db.pool.query(`SET maintenance_work_mem = '64MB'`);
  await withPublishedAt();
  const t = performance.now();
  await db.pool.query(
    `INSERT INTO ${s}.outbox (id, key, version, subject, type, source, content_type, data, occurred_at, published_at)
     SELECT gen_random_uuid(), 'k' || (g % 10000), g / 10000 + 1, 'bench.orders', 'OrderPlaced', 'bench', 'application/json',
            convert_to('{"n":' || g || ',"pad":"' || repeat('x', 200) || '"}', 'UTF8'), now(),
            CASE WHEN g % 100 <> 0 THEN now() END
       FROM generate_series(1, $1::int) g`,
    [rows],
  );
  // The trigger made every row pending: the published ones move to outbox_published, as the relay's mark does.
  await db.pool.query(
    `WITH gone AS (DELETE FROM ${s}.outbox_pending p USING ${s}.outbox o WHERE o.seq = p.seq AND o.published_at IS NOT NULL RETURNING p.seq)
     INSERT INTO ${s}.outbox_published (seq, published_at) SELECT seq, now() FROM gone`,
  );
  const fillMs = Math.round(performance.now() - t);
  const { rows: size } = await db.pool.query<{ mb: number }>(`SELECT (pg_total_relation_size('${s}.outbox') / 1048576)::int AS mb`);
  const concurrent = await measure(async () => {
    const r = await migrate({ pool: db.pool, schema: db.schema });
    if (r.applied.map((m) => m.version).join() !== '4') throw new Error(`expected 000004 alone, applied ${JSON.stringify(r.applied)}`);
  });
  const inTransaction = await measure(async () => {
    await withTransaction(db.pool, async (tx) => {
      await tx.query(`CREATE INDEX outbox_pending_key_idx ON ${s}.outbox (lane, key COLLATE "C", seq) WHERE published_at IS NULL`);
      await tx.query(`DROP INDEX ${s}.outbox_pending_lane_idx`);
      await tx.query(`INSERT INTO ${s}.migrations (migration_set, version, name) VALUES ('outbox', 4, 'pending_key_index')`);
    });
  });
  const result = {
    scenario: 'migrate-under-load',
    rows,
    unpublished: Math.floor(rows / 100),
    outboxMb: size[0]?.mb,
    fillMs,
    writers,
    concurrent,
    inTransaction,
    maxWaitRatio: round(inTransaction.maxMs / Math.max(1, concurrent.maxMs)),
  };
  console.log(JSON.stringify(result, null, 2));
  console.log(`wrote ${writeResult('migrate-under-load', result)}`);
} finally {
  await db.close();
}
