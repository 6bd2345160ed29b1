/**
 * The soak (issue 46): Ferry running for half an hour at half its measured
 * capacity, the way outboxes fail in production: slowly, by bloat, by
 * autovacuum falling behind, by latency creeping up.
 *
 * One process runs a publisher (one transaction per event, open loop), the
 * relay (in process, with its maintenance: a short retention, pruned every
 * minute) and one inbox (`latest`, a one-row upsert per event), against a
 * PostgreSQL cluster of its own (initdb, PostgreSQL's defaults: autovacuum
 * on, which the machine's shared server is not) and a memory stream of its
 * own. The capacity is measured first: events published as the soak
 * publishes them (one transaction each, 16 writers flat out), from the first
 * commit to the last applied by the same relay and inbox. Minute by minute it records commit
 * → applied p50 and p99 (the inbox's COMMIT, by this process's clock), the
 * size of each Ferry table and its indexes, and their live and dead tuples
 * and autovacuum runs (pg_stat_user_tables).
 *
 * Budgets, reported (the smoke run checks only that they are numbers):
 * - p99 of the last `--window` minutes ÷ p99 of the first ≤ 1.5;
 * - table + index size of the schema, end ÷ `--size-span` minutes before ≤ 1.05;
 * - dead ÷ live tuples at the end, worst table holding ≥ 1,000 rows ≤ 0.2.
 *
 *   node bench/dist/scenarios/soak.js [--minutes 30] [--rate N] [--retention-minutes 5] [--quick]
 */
import { randomUUID } from 'node:crypto';
import { quoteIdentifier, withTransaction } from '@ferry/core';
import { createInbox, SILENT_LOGGER } from '@ferry/inbox';
import { createPublisher } from '@ferry/publisher';
import { createRelay } from '@ferry/relay';
import { createTestDatabase, createTestStream, natsUrl, waitFor } from '@ferry/testkit';
import { jetstreamManager } from '@nats-io/jetstream';
import { benchFlags } from '../lib/args.js';
import { LatencyClock } from '../lib/latency.js';
import { startOwnPostgres } from '../lib/own-postgres.js';
import { percentile, printTable, writeResult } from '../lib/stats.js';

const flags = benchFlags(
  'Publisher, relay and inbox at half the measured capacity for --minutes, with retention pruned every minute: latency, table sizes, dead tuples and autovacuum, minute by minute.',
  {
    quick: 'a short run for the smoke test',
    minutes: ['<n> minutes under load', 30, 1],
    'sample-seconds': ['<s> seconds between two samples', 60, 15],
    rate: ['<n> events per second offered; 0: half the measured capacity', 0],
    'retention-minutes': ['<n> the outbox retention, pruned every minute', 5, 1],
    window: ['<n> minutes at each end whose p99 are compared', 5, 0.25],
    'size-span': ['<n> minutes over which the size growth is measured, up to the end', 10, 0.25],
    'autovacuum-naptime': [
      "<s> autovacuum_naptime of the soak's own cluster: a server setting, the most often autovacuum visits a table (PostgreSQL's default 60)",
      60,
      60,
    ],
  },
);
const QUICK = flags.quick;
const MINUTES = flags.minutes;
const RETENTION_MS = flags['retention-minutes'] * 60_000;
const WINDOW = flags.window;
const SIZE_SPAN = flags['size-span'];
const SAMPLE_MS = flags['sample-seconds'] * 1000;
/** Samples in the run, in the p99 window and in the size span. */
const SAMPLES = Math.round((MINUTES * 60_000) / SAMPLE_MS);
const WINDOW_SAMPLES = Math.max(1, Math.round((WINDOW * 60_000) / SAMPLE_MS));
const SPAN_SAMPLES = Math.max(1, Math.round((SIZE_SPAN * 60_000) / SAMPLE_MS));
const CAPACITY_EVENTS = QUICK ? 1500 : 20_000;
/** Writers of the capacity run, each one transaction at a time. */
const CAPACITY_WRITERS = 16;
const KEYS = 10_000;
/** Publish transactions in flight at most; the load generator counts what it could not start as behind. */
const MAX_IN_FLIGHT = 64;
const NAPTIME_S = flags['autovacuum-naptime'];
// PostgreSQL's own range for the setting (1 s to 2,147,483 s), checked before a cluster is made for it.
if (!Number.isInteger(NAPTIME_S) || NAPTIME_S < 1 || NAPTIME_S > 2_147_483) {
  console.error(`--autovacuum-naptime must be whole seconds from 1 to 2147483 (PostgreSQL's range), got ${NAPTIME_S}`);
  process.exit(2);
}
if (WINDOW_SAMPLES * 2 > SAMPLES || SPAN_SAMPLES >= SAMPLES)
  throw new Error(`--minutes ${MINUTES} is too short for --window ${WINDOW} and --size-span ${SIZE_SPAN}`);

interface TableStats {
  tableBytes: number;
  indexBytes: number;
  live: number;
  dead: number;
  autovacuums: number;
  autoanalyzes: number;
}

interface Minute {
  minute: number;
  offered: number;
  applied: number;
  behind: number;
  p50Ms: number;
  p99Ms: number;
  totalBytes: number;
  deadTuples: number;
  autovacuums: number;
  tables: Record<string, TableStats>;
}

// A cluster of its own, with PostgreSQL's defaults: the shared one runs with autovacuum off.
const own = await startOwnPostgres({ autovacuum_naptime: `${NAPTIME_S}s` });
process.env.FERRY_TEST_DATABASE_URL = own.url;
const db = await createTestDatabase({ prefix: 'bench_soak', migrate: ['outbox', 'inbox'], lanes: 16, max: MAX_IN_FLIGHT + 24 });
const s = quoteIdentifier(db.schema);
const stream = await createTestStream({ prefix: 'bench_soak', storage: 'memory' });

/** Every Ferry table of the schema (not the handler's `proj`): its heap (with TOAST) and index bytes, live and dead tuples, autovacuum and autoanalyze runs. */
async function tableStats(): Promise<Record<string, TableStats>> {
  const { rows } = await db.pool.query<{ name: string; t: string; i: string; live: string; dead: string; av: string; aa: string }>(
    `SELECT c.relname AS name, pg_table_size(c.oid)::text AS t, pg_indexes_size(c.oid)::text AS i,
            coalesce(st.n_live_tup, 0)::text AS live, coalesce(st.n_dead_tup, 0)::text AS dead,
            coalesce(st.autovacuum_count, 0)::text AS av, coalesce(st.autoanalyze_count, 0)::text AS aa
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
       LEFT JOIN pg_stat_user_tables st ON st.relid = c.oid
      WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND c.relname <> 'proj' ORDER BY c.relname`,
    [db.schema],
  );
  return Object.fromEntries(
    rows.map((r) => [
      r.name,
      {
        tableBytes: Number(r.t),
        indexBytes: Number(r.i),
        live: Number(r.live),
        dead: Number(r.dead),
        autovacuums: Number(r.av),
        autoanalyzes: Number(r.aa),
      },
    ]),
  );
}

async function main() {
  await db.pool.query(
    `INSERT INTO ${s}.settings (name, value) VALUES ('retention_ms', $1::bigint::text) ON CONFLICT (name) DO UPDATE SET value = excluded.value`,
    [RETENTION_MS],
  );
  // The stream keeps twice what the outbox keeps (at least 10 minutes, well above its duplicate window),
  // so half an hour of events does not fill memory.
  const jsm = await jetstreamManager(stream.nc);
  const info = await jsm.streams.info(stream.name);
  await jsm.streams.update(stream.name, { ...info.config, max_age: Math.max(2 * RETENTION_MS, 600_000) * 1_000_000 });
  await db.pool.query(`CREATE TABLE ${s}.proj (key text PRIMARY KEY, version bigint NOT NULL, payload jsonb NOT NULL)`);

  const clock = new LatencyClock();
  let applied = 0;
  const relay = createRelay({
    databaseUrl: db.url,
    schema: db.schema,
    nats: { servers: natsUrl() },
    maintenance: true,
    pruneCron: '* * * * *',
    retentionMs: RETENTION_MS,
    logger: SILENT_LOGGER,
  });
  const inbox = createInbox({
    pool: db.pool,
    nc: stream.nc,
    stream: stream.name,
    consumer: 'soak',
    schema: db.schema,
    logger: SILENT_LOGGER,
    pullExpiresMs: 2_000,
    handlers: {
      Soaked: async (event, { tx }) => {
        await tx.query(
          `INSERT INTO ${s}.proj (key, version, payload) VALUES ($1, $2, $3)
           ON CONFLICT (key) DO UPDATE SET version = excluded.version, payload = excluded.payload`,
          [event.key, event.version.toString(), event.payload],
        );
      },
    },
    onEvent: (r) => {
      if (r.kind !== 'applied') return;
      applied++;
      clock.arrived(r.id);
    },
  });
  const publisher = createPublisher({ schema: db.schema, source: 'bench-soak' });
  const event = (n: number) => ({
    id: randomUUID(),
    subject: `${stream.prefix}.soaked`,
    key: `account-${n % KEYS}`,
    type: 'Soaked',
    data: { account: n % KEYS, amountCents: 100 + (n % 9000), note: 'soak test event with a payload of a realistic size' },
  });
  await relay.start();
  await inbox.start();
  try {
    // Capacity: the events published as the soak publishes them (one transaction each), by
    // CAPACITY_WRITERS writers as fast as they go, from the first commit to the last event applied.
    const started = performance.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: CAPACITY_WRITERS }, async () => {
        while (next < CAPACITY_EVENTS) {
          const e = event(next++);
          await withTransaction(db.pool, (tx) => publisher.publish(tx, e));
        }
      }),
    );
    await waitFor(() => applied >= CAPACITY_EVENTS, { what: 'the capacity run applied', timeoutMs: 600_000 });
    const capacity = CAPACITY_EVENTS / ((performance.now() - started) / 1000);
    const rate = flags.rate || capacity / 2;
    console.error(
      `capacity ${capacity.toFixed(0)} events/s (publisher → relay → inbox); offering ${rate.toFixed(0)} events/s for ${MINUTES} min`,
    );

    // The soak: open-loop load, one transaction per event, sampled at each minute's end.
    const minutes: Minute[] = [];
    let offered = 0;
    let behind = 0;
    let inFlight = 0;
    let n = CAPACITY_EVENTS;
    const t0 = performance.now();
    const appliedAtStart = applied;
    clock.latencies.length = 0;
    const tick = setInterval(() => {
      const due = Math.floor(((performance.now() - t0) / 1000) * rate - offered - behind);
      for (let i = 0; i < due; i++) {
        if (inFlight >= MAX_IN_FLIGHT) {
          behind++;
          continue;
        }
        offered++;
        inFlight++;
        const e = event(n++);
        withTransaction(db.pool, (tx) => publisher.publish(tx, e))
          .then(() => clock.committed([e.id], true))
          .catch((err: unknown) => console.error(`publish failed: ${(err as Error).message}`))
          .finally(() => inFlight--);
      }
    }, 10);
    let lastApplied = appliedAtStart;
    let lastOffered = 0;
    let lastBehind = 0;
    for (let m = 1; m <= SAMPLES; m++) {
      await new Promise((r) => setTimeout(r, t0 + m * SAMPLE_MS - performance.now()));
      const lat = clock.latencies.splice(0).sort((a, b) => a - b);
      const tables = await tableStats();
      const all = Object.values(tables);
      minutes.push({
        minute: (m * SAMPLE_MS) / 60_000,
        offered: offered - lastOffered,
        applied: applied - lastApplied,
        behind: behind - lastBehind,
        p50Ms: percentile(lat, 50),
        p99Ms: percentile(lat, 99),
        totalBytes: all.reduce((sum, t) => sum + t.tableBytes + t.indexBytes, 0),
        deadTuples: all.reduce((sum, t) => sum + t.dead, 0),
        autovacuums: all.reduce((sum, t) => sum + t.autovacuums, 0),
        tables,
      });
      lastApplied = applied;
      lastOffered = offered;
      lastBehind = behind;
      const last = minutes.at(-1) as Minute;
      console.error(
        `minute ${last.minute}: ${last.applied} applied, p50 ${last.p50Ms.toFixed(1)} ms, p99 ${last.p99Ms.toFixed(1)} ms, ${(last.totalBytes / 2 ** 20).toFixed(1)} MiB, ${last.deadTuples} dead tuples`,
      );
    }
    clearInterval(tick);
    await waitFor(() => inFlight === 0 && applied - appliedAtStart >= offered, { what: 'the soak load applied', timeoutMs: 300_000 });

    const p99Of = (list: Minute[]) => Math.max(...list.map((x) => x.p99Ms));
    const p99Growth = p99Of(minutes.slice(-WINDOW_SAMPLES)) / p99Of(minutes.slice(0, WINDOW_SAMPLES));
    const end = minutes.at(-1) as Minute;
    const before = minutes[minutes.length - 1 - SPAN_SAMPLES] as Minute;
    const sizeGrowth = end.totalBytes / before.totalBytes;
    const held = Object.entries(end.tables).filter(([, t]) => t.live + t.dead >= 1000);
    const shares = held.map(([name, t]) => ({ name, share: t.dead / Math.max(t.live, 1) })).sort((a, b) => b.share - a.share);
    const worst = shares[0] ?? { name: '(none)', share: 0 };

    printTable(
      `Soak: ${MINUTES} min at ${rate.toFixed(0)} events/s (capacity ${capacity.toFixed(0)}), retention ${RETENTION_MS / 60_000} min pruned every minute`,
      ['minute', 'applied', 'p50 ms', 'p99 ms', 'MiB (tables + indexes)', 'dead tuples', 'autovacuum runs'],
      minutes.map((x) => [
        x.minute,
        x.applied,
        x.p50Ms.toFixed(1),
        x.p99Ms.toFixed(1),
        (x.totalBytes / 2 ** 20).toFixed(1),
        x.deadTuples,
        x.autovacuums,
      ]),
    );
    printTable(
      'Soak budgets',
      ['figure', 'value', 'budget'],
      [
        [`p99, last ${WINDOW} min ÷ first ${WINDOW} min`, p99Growth.toFixed(2), '≤ 1.5'],
        [`size, end ÷ ${SIZE_SPAN} min before`, sizeGrowth.toFixed(3), '≤ 1.05'],
        [`dead ÷ live tuples at the end, worst table (${worst.name})`, worst.share.toFixed(3), '≤ 0.2'],
      ],
    );
    const file = writeResult('soak', {
      scenario: 'soak',
      minutes: MINUTES,
      retentionMinutes: RETENTION_MS / 60_000,
      autovacuumNaptimeSeconds: NAPTIME_S,
      window: WINDOW,
      sizeSpan: SIZE_SPAN,
      capacityPerSec: capacity,
      ratePerSec: rate,
      perMinute: minutes,
      deadTupleShares: shares,
      budgets: { p99Growth, sizeGrowth, deadTupleShare: worst.share, deadTupleWorstTable: worst.name },
    });
    console.log(`\nwrote ${file}`);
  } finally {
    await inbox.stop();
    await relay.stop();
    await stream.close();
    await db.close();
    await own.stop();
  }
}

await main();
