/**
 * Scenario 8, a blocked hot key: one key whose first row is dead with
 * 1,000,000 rows waiting behind it (--quick: 20,000), all in the one lane
 * that every other key shares too. Measured against the same lane without
 * the blocked key, in the same run:
 * - the claim: the relay's claim statement over a pending backlog of other
 *   keys (median of repeated claims; it is a SELECT, nothing changes);
 * - the drain: a relay draining a backlog of the other keys.
 * Targets (issue 12): claim ≤ 2× the unblocked claim; other keys drain at
 * ≥ 0.8× their unblocked rate.
 *
 *   node bench/dist/scenarios/blocked-key.js [--quick] [--blocked N] [--backlog N] [--keys N] [--claims N] [--trials N]
 */
import { LIMITS, quoteIdentifier, RELAY_PROTOCOL } from '@ferry/core';
import { claimBatchSql, RELAY_DEFAULTS } from '@ferry/relay';
import { createTestDatabase } from '@ferry/testkit';
import { benchFlags } from '../lib/args.js';
import { generateRows, outboxTables, relayDrainFreshStream } from '../lib/outbox.js';
import { printTable, summarize, writeResult } from '../lib/stats.js';

const flags = benchFlags("Claim cost and the other keys' drain with a blocked hot key, against the same lane unblocked.", {
  quick: 'a small run (20,000 blocked rows, 2,000 backlog, 10 claims, 1 trial)',
  blocked: ['<n> rows waiting behind the dead row', 1_000_000, 20_000],
  backlog: ['<n> rows of other keys to drain', 20_000, 2000],
  keys: ['<n> other keys', 1000],
  claims: ['<n> claims timed per trial', 30, 10],
  trials: ['<n> trials', 2, 1],
});

const db = await createTestDatabase({ prefix: 'bench_blocked', lanes: 1, max: 4 });
const s = quoteIdentifier(db.schema);
const claimSql = claimBatchSql(s);
let run = 0;

/** Median milliseconds of the relay's claim over a pending backlog of other keys (rows removed afterwards). */
async function claimMs(): Promise<number> {
  const prefix = `c${run++}-`;
  await generateRows(db.pool, db.schema, { count: flags.backlog, keys: flags.keys, keyPrefix: prefix, subject: 'bench.blocked' });
  await db.pool.query(`ANALYZE ${outboxTables(s)}`);
  // The claim walks only lanes its caller holds with an unexpired lease (outbox migration 000010); a drain's relay released it.
  // Its owner needs a heartbeat the schema's relay floor admits (outbox migration 000013).
  await db.pool.query(
    `INSERT INTO ${s}.relay_instances (instance, application_name, backend_pid, seen_at, expires_at, release, protocol)
       VALUES ('bench', 'bench', 0, now(), now(), 'bench', ${RELAY_PROTOCOL}) ON CONFLICT DO NOTHING`,
  );
  await db.pool.query(`UPDATE ${s}.relay_leases SET owner = 'bench', expires_at = now() + interval '1 day' WHERE lane = 0`);
  const ms: number[] = [];
  for (let i = 0; i < flags.claims; i++) {
    const t = performance.now();
    const { rows } = await db.pool.query(claimSql, [
      [0],
      [''],
      [],
      RELAY_DEFAULTS.batchSize,
      RELAY_DEFAULTS.maxInFlight,
      LIMITS.maxEventBytes,
      64 * 1024 * 1024,
      'bench',
    ]);
    ms.push(performance.now() - t);
    if (rows.length === 0) throw new Error('the claim found nothing to claim');
  }
  await db.pool.query(`DELETE FROM ${s}.outbox WHERE key LIKE $1`, [`${prefix}%`]);
  // Released, as a stopping relay does: the made-up holder has no connection, and a lease whose holder is gone
  // is takeable only once 0.8 of its term has passed since its renewal (issue 41), here most of a day.
  await db.pool.query(`UPDATE ${s}.relay_leases SET owner = NULL, expires_at = now() WHERE lane = 0 AND owner = 'bench'`);
  return summarize(ms).median;
}

/** Events per second of a relay draining a backlog of other keys. */
async function drain(): Promise<number> {
  return relayDrainFreshStream(db, 'benchblocked', { count: flags.backlog, keys: flags.keys, keyPrefix: `d${run++}-` });
}

const unblocked = { claimMs: [] as number[], drain: [] as number[] };
for (let t = 0; t < flags.trials; t++) {
  unblocked.claimMs.push(await claimMs());
  unblocked.drain.push(await drain());
}

// The hot key: its rows first in seq order (what a seq-order claim had to wade through), its head dead.
await generateRows(db.pool, db.schema, { count: flags.blocked, keys: 1, keyPrefix: 'HOT', subject: 'bench.blocked' });
// The head's delivery state is on its pending row (outbox migration 000015).
await db.pool.query(
  `UPDATE ${s}.outbox_pending p SET dead_at = now(), attempts = 1, last_error = 'bench: dead'
     FROM ${s}.outbox o WHERE o.seq = p.seq AND p.key = 'HOT0' AND o.version = 1`,
);
await db.pool.query(`VACUUM ANALYZE ${outboxTables(s)}`);

const blocked = { claimMs: [] as number[], drain: [] as number[] };
for (let t = 0; t < flags.trials; t++) {
  blocked.claimMs.push(await claimMs());
  blocked.drain.push(await drain());
}
const { rows } = await db.pool.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${s}.outbox_pending WHERE key = 'HOT0'`);
if (Number(rows[0]?.n) !== flags.blocked) throw new Error(`the blocked key lost rows: ${rows[0]?.n} of ${flags.blocked} still pending`);
await db.close();

const result = {
  blockedRows: flags.blocked,
  backlog: flags.backlog,
  keys: flags.keys,
  claimMs: { unblocked: summarize(unblocked.claimMs), blocked: summarize(blocked.claimMs) },
  drainEventsPerSec: { unblocked: summarize(unblocked.drain), blocked: summarize(blocked.drain) },
  claimRatio: summarize(blocked.claimMs).median / summarize(unblocked.claimMs).median,
  drainRatio: summarize(blocked.drain).median / summarize(unblocked.drain).median,
};
printTable(
  `A blocked key with ${flags.blocked} rows behind its dead head, one lane (targets: claim ≤ 2×, drain ≥ 0.8×)`,
  ['', 'unblocked', 'blocked', 'ratio'],
  [
    ['claim, ms (median)', result.claimMs.unblocked.median, result.claimMs.blocked.median, result.claimRatio],
    ['other keys drain, ev/s', result.drainEventsPerSec.unblocked.median, result.drainEventsPerSec.blocked.median, result.drainRatio],
  ],
);
console.log(`wrote ${writeResult('blocked-key', result)}`);
