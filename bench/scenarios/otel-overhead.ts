/**
 * Tracing cost: publish and relay-drain throughput with `@opentelemetry/api`
 * absent for Ferry (hidden from packages/core/src/otel.ts by
 * bench/lib/no-otel.ts; the baseline; pg-boss, under the relay, loads the
 * API in every mode since it is a required peer of pg-boss), present with no SDK
 * registered (what a service gets by merely installing the API), and with an
 * SDK recording every span into a discarding exporter (tracing on). Each trial
 * runs each mode in its own child process, in rotating order, so the modes
 * share the machine's noise; figures are ratios to the baseline of the same
 * trial (for the CPU per publish lower is better, for the rates higher).
 *
 *   node bench/dist/scenarios/otel-overhead.js [--quick] [--trials 3] [--seconds 3] [--events 20000] [--writers 8]
 *
 * Not part of `npm run bench`.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { otel, type Queryable, quoteIdentifier } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createTestDatabase, createTestStream } from '@ferry/testkit';
import { benchFlags } from '../lib/args.js';
import { relayDrain } from '../lib/outbox.js';
import { printTable, summarize, writeResult } from '../lib/stats.js';
import { loopNodePostgresWriters } from '../lib/writers.js';

const MODES = ['absent', 'api', 'sdk'] as const;
type Mode = (typeof MODES)[number];
interface TrialResult {
  mode: Mode;
  /** CPU of one publish() call on a connection that answers at once (no database): validation, encoding and tracing. */
  publishCpuUs: number;
  publishTxPerSec: number;
  drainEventsPerSec: number;
  /** CPU of this process (the relay, in process) per 1,000 events drained, in ms. */
  drainCpuMsPer1k: number;
  spans: number;
}

const flags = benchFlags(
  'Tracing cost: Ferry without @opentelemetry/api, with the API and no SDK, with a recording SDK (not part of npm run bench).',
  {
    quick: 'a small run',
    trials: ['<n> trials', 3, 1],
    seconds: ['<s> seconds per publish measurement', 3, 1],
    events: ['<n> events drained per trial', 20_000, 3000],
    writers: ['<n> concurrent writers', 8],
    child: ['<mode> internal: run one mode (absent, api, sdk) and print its JSON', ''],
  },
);

const SELF = fileURLToPath(import.meta.url);
const NO_OTEL = fileURLToPath(new URL('../lib/no-otel.js', import.meta.url));

/** With an SDK: a provider that records every span and hands it to an exporter that drops it. */
async function registerSdk(): Promise<() => number> {
  const api = await import('@opentelemetry/api');
  const { AsyncLocalStorageContextManager } = await import('@opentelemetry/context-async-hooks');
  const { BasicTracerProvider, BatchSpanProcessor } = await import('@opentelemetry/sdk-trace-base');
  let exported = 0;
  const provider = new BasicTracerProvider({
    spanProcessors: [
      new BatchSpanProcessor({
        export: (spans, done) => {
          exported += spans.length;
          done({ code: 0 });
        },
        shutdown: async () => {},
      }),
    ],
  });
  api.trace.setGlobalTracerProvider(provider);
  api.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  return () => exported;
}

/**
 * Microseconds per publish() on a fake connection that answers the insert at
 * once: the publisher's own CPU, where a tracing cost would show undiluted by
 * database round trips (median of 5 rounds of 20,000 calls, after a warm-up).
 */
async function publishCpu(inSpan: <T>(fn: () => Promise<T>) => Promise<T>): Promise<number> {
  const publisher = createPublisher({ source: 'bench' });
  const tx = {
    query: async (_text: string, values?: unknown[]) => ({
      rows: [{ id: values?.[0], seq: '1', version: '1', existing: false, same: true }],
    }),
  } as unknown as Queryable;
  const event = { subject: 'orders.placed', key: 'order-1', type: 'OrderPlaced', data: { orderId: 1, total: 4999, currency: 'EUR' } };
  const round = async (n: number) => {
    const t0 = performance.now();
    for (let i = 0; i < n; i++) await inSpan(() => publisher.publish(tx, event));
    return ((performance.now() - t0) * 1000) / n;
  };
  await round(5_000);
  const rounds: number[] = [];
  for (let r = 0; r < 5; r++) rounds.push(await round(flags.quick ? 2_000 : 20_000));
  return summarize(rounds).median;
}

async function child(mode: Mode): Promise<TrialResult> {
  if ((otel === undefined) !== (mode === 'absent'))
    throw new Error(`mode ${mode}, but @opentelemetry/api is ${otel ? 'present' : 'absent'}`);
  const exported = mode === 'sdk' ? await registerSdk() : () => 0;
  // With tracing on, every transaction runs inside a span, as under HTTP auto-instrumentation.
  const inSpan =
    mode === 'sdk' && otel
      ? <T>(fn: () => Promise<T>) =>
          (otel as NonNullable<typeof otel>).trace.getTracer('bench').startActiveSpan('POST /orders', async (span) => {
            try {
              return await fn();
            } finally {
              span.end();
            }
          })
      : <T>(fn: () => Promise<T>) => fn();
  const publishCpuUs = await publishCpu(inSpan);
  const db = await createTestDatabase({ prefix: `bench_otel_${mode}`, lanes: 8, max: flags.writers + 4 });
  const stream = await createTestStream({ prefix: `benchotel${mode}` });
  try {
    const publisher = createPublisher({ schema: db.schema, source: 'bench' });
    const subject = `${stream.prefix}.orders`;
    const publishTxPerSec = await loopNodePostgresWriters(db.pool, flags.writers, flags.seconds, async (c, i) => {
      await inSpan(() =>
        publisher.publish(c, {
          subject,
          key: `order-${i % 5000}`,
          type: 'OrderPlaced',
          data: { orderId: i, total: 4999, currency: 'EUR' },
        }),
      );
    });
    // The published rows would be drained too: start the drain from an empty outbox.
    const q = quoteIdentifier(db.schema);
    await db.pool.query(`TRUNCATE ${q}.outbox, ${q}.key_versions`);
    const cpu0 = process.cpuUsage();
    const drainEventsPerSec = await relayDrain(
      db.pool,
      db.schema,
      { databaseUrl: db.url, schema: db.schema, nats: { servers: stream.nc.getServer() }, batchSize: 500, maxInFlight: 5000 },
      { count: flags.events, keys: 1000, keyPrefix: 'k', subject },
    );
    const cpu = process.cpuUsage(cpu0);
    const drainCpuMsPer1k = (cpu.user + cpu.system) / 1000 / (flags.events / 1000);
    await new Promise((r) => setTimeout(r, 6000)); // one batch-export interval: the recorded spans are counted
    return { mode, publishCpuUs, publishTxPerSec, drainEventsPerSec, drainCpuMsPer1k, spans: exported() };
  } finally {
    await stream.close();
    await db.close();
  }
}

function runChild(mode: Mode): TrialResult {
  const args = [...(mode === 'absent' ? ['--import', NO_OTEL] : []), SELF, '--child', mode, ...process.argv.slice(2)];
  const r = spawnSync(process.execPath, args, { encoding: 'utf8', timeout: 600_000 });
  if (r.status !== 0) throw new Error(`the ${mode} trial failed (${r.status}):\n${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').at(-1) as string) as TrialResult;
}

if (flags.child) {
  console.log(JSON.stringify(await child(flags.child as Mode)));
} else {
  const trials: TrialResult[][] = [];
  for (let t = 0; t < flags.trials; t++) {
    const order = MODES.map((_, i) => MODES[(i + t) % MODES.length] as Mode);
    const results = new Map(order.map((m) => [m, runChild(m)]));
    trials.push(MODES.map((m) => results.get(m) as TrialResult));
    console.error(`trial ${t + 1}/${flags.trials}: ${JSON.stringify([...results.values()])}`);
  }
  type Field = 'publishCpuUs' | 'publishTxPerSec' | 'drainEventsPerSec' | 'drainCpuMsPer1k';
  const ratio = (m: Mode, f: Field) =>
    summarize(
      trials.map((tr) => (tr.find((x) => x.mode === m) as TrialResult)[f] / (tr.find((x) => x.mode === 'absent') as TrialResult)[f]),
    );
  const per = (m: Mode, f: Field, digits = 0) => trials.map((tr) => (tr.find((x) => x.mode === m) as TrialResult)[f].toFixed(digits));
  const rows = MODES.map((m) => [
    m,
    per(m, 'publishCpuUs', 1).join(' / '),
    ratio(m, 'publishCpuUs').median,
    per(m, 'publishTxPerSec').join(' / '),
    ratio(m, 'publishTxPerSec').median,
    per(m, 'drainEventsPerSec').join(' / '),
    ratio(m, 'drainEventsPerSec').median,
    per(m, 'drainCpuMsPer1k').join(' / '),
    ratio(m, 'drainCpuMsPer1k').median,
    trials.map((tr) => (tr.find((x) => x.mode === m) as TrialResult).spans).join(' / '),
  ]);
  printTable(
    `OpenTelemetry cost (${flags.writers} writers × ${flags.seconds} s publish; ${flags.events} events drained; ${flags.trials} trials)`,
    [
      '@opentelemetry/api',
      'publish µs CPU per trial',
      'ratio',
      'publish tx/s per trial',
      'ratio',
      'drain events/s per trial',
      'ratio',
      'drain CPU ms/1k events',
      'ratio',
      'spans exported',
    ],
    rows,
  );
  const file = writeResult('otel-overhead', {
    writers: flags.writers,
    seconds: flags.seconds,
    events: flags.events,
    trials,
    ratios: Object.fromEntries(
      MODES.map((m) => [
        m,
        {
          publishCpu: ratio(m, 'publishCpuUs'),
          publish: ratio(m, 'publishTxPerSec'),
          drain: ratio(m, 'drainEventsPerSec'),
          drainCpu: ratio(m, 'drainCpuMsPer1k'),
        },
      ]),
    ),
  });
  console.log(`\nwrote ${file}`);
}
