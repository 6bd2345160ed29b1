/**
 * The console's dlq preview and blocked keys with one hot key: --rows rows
 * (default 1,000,000; --quick 50,000) waiting behind its dead head. Times the
 * preview of a discard of that key, of every failed row, and the blocked keys
 * page's query, --fetches times each (median and worst), with the CLI's 2 s
 * statement_timeout. Target: each under 500 ms.
 *
 *   node bench/dist/scenarios/console-hot-key.js [--quick] [--rows N] [--fetches N]
 */
import { quoteIdentifier } from '@ferry/core';
import { blockedKeys, previewFailed } from '@ferry/relay/testing';
import { createTestDatabase } from '@ferry/testkit';
import pg from 'pg';
import { benchFlags } from '../lib/args.js';
import { generateRows, outboxTables } from '../lib/outbox.js';
import { printTable, summarize, writeResult } from '../lib/stats.js';

const flags = benchFlags('the dlq preview and blocked keys with a million rows behind one dead head', {
  quick: 'a small run (50,000 rows, 3 fetches)',
  rows: ['<n> rows behind the dead head', 1_000_000, 50_000],
  fetches: ['<n> fetches of each', 5, 3],
});

const db = await createTestDatabase({ prefix: 'bench_hot_key', max: 4 });
const pool = new pg.Pool({ connectionString: db.url, max: 2, statement_timeout: 2000 });
const results: Record<string, { medianMs: number; maxMs: number; behind: number }> = {};
try {
  const s = quoteIdentifier(db.schema);
  await generateRows(db.pool, db.schema, { count: flags.rows + 1, keys: 1, keyPrefix: 'hot-', subject: 'bench.hot' });
  // The head's delivery state is on its pending row (outbox migration 000015).
  await db.pool.query(
    `UPDATE ${s}.outbox_pending p SET dead_at = now(), attempts = 25, last_error = 'no_responders: bench'
       FROM ${s}.outbox o WHERE o.seq = p.seq AND o.version = 1`,
  );
  await db.pool.query(`VACUUM ANALYZE ${outboxTables(s)}`);
  const cases: Array<[string, () => Promise<number>]> = [
    ['preview: discard the hot key', async () => (await previewFailed(pool, db.schema, { key: 'hot-0' })).behind],
    ['preview: discard every failed row', async () => (await previewFailed(pool, db.schema, {})).behind],
    ['blocked keys (200 oldest)', async () => (await blockedKeys(pool, db.schema, 200))[0]?.waiting ?? 0],
  ];
  for (const [name, run] of cases) {
    const ms: number[] = [];
    let behind = 0;
    for (let i = 0; i < flags.fetches; i++) {
      const t = performance.now();
      behind = await run();
      ms.push(performance.now() - t);
    }
    const sum = summarize(ms);
    results[name] = { medianMs: sum.median, maxMs: sum.max, behind };
  }
} finally {
  await pool.end();
  await db.close();
}
printTable(
  `One key with ${flags.rows} rows behind its dead head (target < 500 ms)`,
  ['query', `median of ${flags.fetches} ms`, 'worst ms', 'rows behind'],
  Object.entries(results).map(([name, r]) => [name, r.medianMs, r.maxMs, r.behind]),
);
console.log(`wrote ${writeResult('console-hot-key', { rows: flags.rows, fetches: flags.fetches, results })}`);
