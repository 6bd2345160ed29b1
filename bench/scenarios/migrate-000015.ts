/**
 * What outbox migration 000015 costs the publishers: it copies every retained
 * row's delivery state into outbox_pending / outbox_published with the outbox
 * locked, so publishes wait until it commits. An outbox at version 14 of
 * `--rows` rows (default 1,000,000, `--pending` of them unpublished, default
 * 100,000; built on today's schema and turned back with testkit's
 * `undoPendingTable`), then `migrate()` applies 000015 while `--writers`
 * publishers commit one event per transaction. Reports the migration's time,
 * the publish transactions' latency during it (the longest is what a request
 * publishing an event felt), and checks that the pending rows came through.
 *
 *   node bench/dist/scenarios/migrate-000015.js [--rows 1000000] [--pending 100000] [--writers 4]
 *
 * Not in the runner's scenarios (about a minute and a half of a 2-core
 * machine, most of it building the outbox); the figure is in
 * docs/operations.md and bench/results/migrate-000015.json.
 */
import { migrate, quoteIdentifier } from '@ferry/core';
import { createTestDatabase, undoPendingTable } from '@ferry/testkit';
import { benchFlags, sleep } from '../lib/args.js';
import { generateRowsSql } from '../lib/outbox.js';
import { publishLoad } from '../lib/publish-load.js';
import { writeResult } from '../lib/stats.js';

/** Rows generated per statement. */
const CHUNK = 100_000;

const flags = benchFlags(
  'Outbox migration 000015 (delivery state beside the event row) on a large outbox under publish load: its time and the publishes it holds up.',
  {
    rows: ['<n> retained outbox rows', 1_000_000],
    pending: ['<n> of them unpublished', 100_000],
    writers: ['<n> concurrent publishers', 4],
  },
);

const db = await createTestDatabase({ prefix: 'bench_mig15', max: flags.writers + 4 });
const s = quoteIdentifier(db.schema);
try {
  const t = performance.now();
  // History first (published an hour ago), then the backlog, in chunks of one transaction each.
  const parts = [
    { from: 0, count: flags.rows - flags.pending, publishedAgoMs: 3_600_000 },
    { from: flags.rows - flags.pending, count: flags.pending },
  ];
  for (const part of parts) {
    for (let from = part.from; from < part.from + part.count; from += CHUNK) {
      const count = Math.min(CHUNK, part.from + part.count - from);
      const client = await db.pool.connect();
      try {
        await client.query('BEGIN');
        for (const q of generateRowsSql(
          db.schema,
          {
            count,
            keys: 10_000,
            keyPrefix: 'k',
            subject: 'bench.orders',
            ...(part.publishedAgoMs ? { publishedAgoMs: part.publishedAgoMs } : {}),
          },
          from,
        )) {
          await client.query(q.text, q.values);
        }
        await client.query('COMMIT');
      } finally {
        client.release();
      }
    }
  }
  await undoPendingTable(db.pool, db.schema);
  await db.pool.query(`VACUUM ANALYZE ${s}.outbox`);
  const fillMs = Math.round(performance.now() - t);
  const before = await db.pool.query<{ pending: number; mb: number }>(
    `SELECT count(*) FILTER (WHERE published_at IS NULL)::int AS pending, (pg_total_relation_size('${s}.outbox') / 1048576)::int AS mb FROM ${s}.outbox`,
  );

  const load = publishLoad(db.pool, db.schema, flags.writers);
  await sleep(2_000);
  const from = performance.now();
  const applied = await migrate({ pool: db.pool, schema: db.schema });
  const to = performance.now();
  await sleep(1_000);
  const during = await load.stop(from, to);
  if (applied.applied.map((m) => m.version).join() !== '15')
    throw new Error(`expected 000015 alone, applied ${JSON.stringify(applied.applied)}`);

  // Every row pending before is pending after, and the publishes during the run too (none is published here).
  const after = await db.pool.query<{ pending: number; published: number; events: number }>(
    `SELECT (SELECT count(*) FROM ${s}.outbox_pending)::int AS pending, (SELECT count(*) FROM ${s}.outbox_published)::int AS published,
            (SELECT count(*) FROM ${s}.outbox)::int AS events`,
  );
  const a = after.rows[0];
  const pendingBefore = before.rows[0]?.pending ?? 0;
  if (!a || a.published !== flags.rows - pendingBefore || a.pending + a.published !== a.events) {
    throw new Error(`the delivery state did not come through: ${JSON.stringify({ pendingBefore, after: a })}`);
  }
  const result = {
    scenario: 'migrate-000015',
    rows: flags.rows,
    pending: pendingBefore,
    outboxMb: before.rows[0]?.mb,
    fillMs,
    writers: flags.writers,
    migrationMs: Math.round(to - from),
    ...during,
  };
  console.log(JSON.stringify(result, null, 2));
  console.log(`wrote ${writeResult('migrate-000015', result)}`);
} finally {
  await db.close();
}
