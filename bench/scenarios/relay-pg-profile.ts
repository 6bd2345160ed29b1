/**
 * Where the relay's PostgreSQL CPU goes, statement by statement (issue 46:
 * "find where the CPU goes, with a profile and the statement costs").
 *
 * Runs relay-drain (the relay as a separate process with its defaults, a
 * backlog over `--keys` keys, file storage, no hot key) against a PostgreSQL
 * cluster of this scenario's own with pg_stat_statements loaded (the shared
 * server is never reconfigured), then ranks the statements by their execution
 * time, as µs per event relayed: the events are the rows the relay's mark
 * deleted from outbox_pending. pg_stat_statements counts time inside the
 * executor (no parse, bind or network) as wall time, on a machine where the
 * relay, NATS and PostgreSQL share two cores: read the shares, not the sums.
 * relay-drain's PostgreSQL CPU per 1,000 events (from /proc), printed beside
 * them, is the total the shares divide. The benchmark's own statements (the
 * backlog's insert and the trigger's pending rows, the schema's set-up) are
 * listed apart. Not part of npm run bench.
 *
 *   node bench/dist/scenarios/relay-pg-profile.js [--keys 1000] [--trials 2]
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { declareFlags, numArg } from '../lib/args.js';
import { startOwnPostgres } from '../lib/own-postgres.js';
import { printTable, writeResult } from '../lib/stats.js';

declareFlags(
  'node bench/dist/scenarios/relay-pg-profile.js',
  "The relay's PostgreSQL time by statement (pg_stat_statements on a cluster of its own), during relay-drain at one key spread (not part of npm run bench).",
  {
    keys: '<n> keys the backlog spreads over (default 1000)',
    trials: "<n> relay-drain's interleaved trials (default 2)",
  },
);

const KEYS = numArg('keys', 1000);
const TRIALS = numArg('trials', 2);

/** What a statement is, by its text: the relay's own, or the benchmark's. */
const KINDS: readonly { kind: string; relay: boolean; match: RegExp }[] = [
  { kind: 'claim (claim-batch.ts: the walk, the rows, the event rows)', relay: true, match: /^WITH RECURSIVE walk/ },
  { kind: 'mark (delete pending, insert published, lease check)', relay: true, match: /^WITH done AS \( DELETE FROM \S+\.outbox_pending/ },
  { kind: "chain continuation (a long chain's next rows)", relay: true, match: /^SELECT x\.seq::text AS seq/ },
  { kind: 'leases (renew, take, release)', relay: true, match: /relay_leases|pg_try_advisory_lock/ },
  { kind: 'instances (heartbeat, count)', relay: true, match: /relay_instances/ },
  { kind: 'wait record', relay: true, match: /relay_waiting/ },
  { kind: "benchmark: the backlog's insert", relay: false, match: /^INSERT INTO \S+\.outbox \(/ },
  { kind: "benchmark: the backlog's pending rows (trigger)", relay: false, match: /^INSERT INTO \S+\.outbox_pending/ },
];

interface Statement {
  query: string;
  calls: number;
  rows: number;
  ms: number;
}

const own = await startOwnPostgres({
  shared_preload_libraries: 'pg_stat_statements',
  'pg_stat_statements.max': '10000',
  'pg_stat_statements.track': 'all',
  // As the shared server the tests and relay-drain use: its upkeep is not what is measured.
  autovacuum: 'off',
});
const results = mkdtempSync(join(tmpdir(), 'ferry-pg-profile-'));
try {
  const admin = new pg.Client({ connectionString: own.url });
  await admin.connect();
  await admin.query('CREATE EXTENSION pg_stat_statements');
  await admin.query('SELECT pg_stat_statements_reset()');
  const drain = fileURLToPath(new URL('./relay-drain.js', import.meta.url));
  const run = spawnSync(
    process.execPath,
    [drain, '--keys', String(KEYS), '--storage', 'file', '--trials', String(TRIALS), '--hot-events', '0'],
    {
      env: { ...process.env, FERRY_TEST_DATABASE_URL: own.url, FERRY_BENCH_RESULTS_DIR: results },
      stdio: ['ignore', 'inherit', 'inherit'],
    },
  );
  if (run.status !== 0) throw new Error(`relay-drain exited ${run.status ?? run.signal}`);
  const drained = JSON.parse(readFileSync(join(results, 'relay-drain.json'), 'utf8')) as {
    headline: { postgresCpuMsPer1k: number; relayEventsPerSec: number };
  };
  const { rows } = await admin.query<Statement>(
    `SELECT regexp_replace(query, '\\s+', ' ', 'g') AS query, calls::float8 AS calls, rows::float8 AS rows, total_exec_time AS ms
       FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`,
  );
  await admin.end();

  const groups = new Map<string, { relay: boolean; calls: number; rows: number; ms: number }>();
  for (const s of rows) {
    const k = KINDS.find((x) => x.match.test(s.query.trim()));
    const kind = k?.kind ?? 'other (set-up, pg-boss, the benchmark)';
    const g = groups.get(kind) ?? { relay: k?.relay ?? false, calls: 0, rows: 0, ms: 0 };
    g.calls += s.calls;
    g.rows += s.rows;
    g.ms += s.ms;
    groups.set(kind, g);
  }
  const events = [...groups.entries()].find(([kind]) => kind.startsWith('mark'))?.[1].rows ?? 0;
  if (events === 0) throw new Error('pg_stat_statements saw no mark: is the relay the one measured?');
  const relayMs = [...groups.values()].filter((g) => g.relay).reduce((sum, g) => sum + g.ms, 0);
  const table = [...groups.entries()]
    .map(([kind, g]) => ({
      kind,
      relay: g.relay,
      calls: g.calls,
      rowsPerCall: g.rows / Math.max(g.calls, 1),
      usPerEvent: (g.ms * 1000) / events,
      shareOfRelay: g.relay ? g.ms / relayMs : undefined,
    }))
    .sort((a, b) => Number(b.relay) - Number(a.relay) || b.usPerEvent - a.usPerEvent);
  printTable(
    `The relay's PostgreSQL time by statement: relay-drain, ${KEYS} keys, ${events} events relayed (warm-ups included); its backends' CPU ${drained.headline.postgresCpuMsPer1k.toFixed(1)} ms per 1,000 events`,
    ['statement', 'calls', 'rows a call', 'executor µs per event', 'share of the relay'],
    table.map((r) => [
      r.kind,
      r.calls,
      r.rowsPerCall.toFixed(1),
      r.usPerEvent.toFixed(2),
      r.shareOfRelay === undefined ? '(not the relay)' : `${(r.shareOfRelay * 100).toFixed(1)} %`,
    ]),
  );
  const file = writeResult('relay-pg-profile', {
    scenario: 'relay-pg-profile',
    keys: KEYS,
    trials: TRIALS,
    events,
    postgresCpuMsPer1k: drained.headline.postgresCpuMsPer1k,
    relayEventsPerSec: drained.headline.relayEventsPerSec,
    statements: table,
  });
  console.log(`\nwrote ${file}`);
} finally {
  rmSync(results, { recursive: true, force: true });
  await own.stop();
}
