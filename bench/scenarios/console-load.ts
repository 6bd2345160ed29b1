/**
 * The operator console under a large outbox (issue 31): every page's answer
 * time with 1,000,000 pending rows and 100,000 dead ones (--quick: 50,000 and
 * 5,000), and the relay's drain rate while the console refreshes, against the
 * same drain without it, in the same run.
 * - pages: each console page and preview fetched --fetches times over HTTP
 *   (median and worst), the console in process with its CLI's default
 *   statement_timeout (2 s);
 * - drain: a relay draining --drain pending rows (the 100,000 dead still
 *   there), interleaved trials without the console, with `ferry console`
 *   beside the relay (a process of its own), and with the console served
 *   by the relay's process (as `ferry relay` can), each with --tabs browser
 *   tabs that refresh the overview and the blocked keys every second (five
 *   times the console's default refresh). The tabs run in a process of their
 *   own (bench/lib/console-tabs.ts): a browser never shares the relay's
 *   event loop (before, they ran in the relay's process and were measured as
 *   the console's cost).
 * Targets: every page < 500 ms; drain with the console ≥ 0.95× without.
 *
 *   node bench/dist/scenarios/console-load.js [--quick] [--pending N] [--dead N] [--drain N] [--fetches N] [--trials N] [--tabs N]
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { quoteIdentifier } from '@ferry/core';
import { createTestDatabase, createTestStream, natsUrl } from '@ferry/testkit';
import { benchFlags, until } from '../lib/args.js';
import { BENCH_CONSOLE_TOKEN, serveBenchConsole } from '../lib/bench-console.js';
import { generateRows, outboxTables, publishPendingSql, relayDrain } from '../lib/outbox.js';
import { cpuMeter } from '../lib/relay-process.js';
import { printTable, summarize, writeResult } from '../lib/stats.js';

const flags = benchFlags('Console page times at a large outbox, and the relay drain while it refreshes.', {
  quick: 'a small run (50,000 pending, 5,000 dead, 20,000 drained, 3 fetches, 1 trial)',
  pending: ['<n> pending rows while the pages are timed', 1_000_000, 50_000],
  dead: ['<n> dead rows, one per key, each with a row waiting behind it', 100_000, 5_000],
  drain: ['<n> rows the relay drains per trial', 200_000, 20_000],
  fetches: ['<n> fetches per page', 5, 3],
  trials: ['<n> drain trials with and without the console', 2, 1],
  tabs: ['<n> tabs refreshing every second during a drain', 3],
});

const db = await createTestDatabase({ prefix: 'bench_console', max: 6 });
const s = quoteIdentifier(db.schema);
const console_ = await serveBenchConsole(db.url, db.schema);
const AUTH = { authorization: `Bearer ${BENCH_CONSOLE_TOKEN}` };

// The dead rows first (the oldest, as after an outage), each key with one more row waiting behind it; then the pending backlog.
const t0 = performance.now();
await generateRows(db.pool, db.schema, { count: flags.dead * 2, keys: flags.dead, keyPrefix: 'dead-', subject: 'bench.console' });
// Delivery state is on the pending rows (outbox migration 000015).
await db.pool.query(
  `UPDATE ${s}.outbox_pending p SET dead_at = now(), attempts = 25, last_error = 'no_responders: bench'
     FROM ${s}.outbox o WHERE o.seq = p.seq AND p.key LIKE 'dead-%' AND o.version = 1`,
);
await generateRows(db.pool, db.schema, { count: flags.pending, keys: 10_000, keyPrefix: 'p-', subject: 'bench.console' });
await db.pool.query(`VACUUM ANALYZE ${outboxTables(s)}`);
console.log(
  `seeded ${flags.pending} pending + ${flags.dead} dead (+${flags.dead} behind them) in ${((performance.now() - t0) / 1000).toFixed(0)} s`,
);

const { rows: sample } = await db.pool.query<{ id: string }>(`SELECT id::text AS id FROM ${s}.outbox WHERE key = 'p-42' AND version = 2`);
const someId = sample[0]?.id ?? '';

/** Milliseconds of one request, checking it answered 200. */
async function timed(path: string, body?: URLSearchParams, csrf?: string): Promise<number> {
  const t = performance.now();
  const res = await fetch(`${console_.url}${path}`, {
    method: body ? 'POST' : 'GET',
    headers: { ...AUTH, ...(body ? { 'content-type': 'application/x-www-form-urlencoded', origin: console_.url } : {}) },
    ...(body ? { body: new URLSearchParams({ ...Object.fromEntries(body), csrf: csrf ?? '' }).toString() } : {}),
  });
  const text = await res.text();
  const ms = performance.now() - t;
  if (res.status !== 200) {
    // A page over its statement timeout answers 503: counted, and shown in the table, not fatal.
    failures.push(`${path}: HTTP ${res.status}: ${/id="error">([^<]*)/.exec(text)?.[1] ?? text.slice(0, 200)}`);
  }
  return ms;
}
const failures: string[] = [];

const csrf = /name="csrf" value="([0-9a-f]{64})"/.exec(await (await fetch(`${console_.url}/blocked`, { headers: AUTH })).text())?.[1] ?? '';
const pages: Array<[string, string, URLSearchParams?]> = [
  ['overview', '/'],
  ['overview refresh (fragment)', '/?fragment=1'],
  ['blocked keys (200 oldest)', '/blocked'],
  ['events: by key', '/events?key=p-42'],
  ['events: by id', `/events?id=${someId}`],
  ['events: state dead (newest 200)', '/events?state=dead'],
  ['events: type, last hour', `/events?type=OrderPlaced&since=${encodeURIComponent(new Date(Date.now() - 3600_000).toISOString())}`],
  ['events: subject prefix + pending', '/events?subject=bench.&state=pending'],
  ['one event + key history', `/event?id=${someId}`],
  ['parked', '/parked'],
  ['inbox versions of a key', '/versions?key=p-42'],
  ['audit', '/audit'],
  ['preview: discard one key', '/dlq/preview', new URLSearchParams({ action: 'discard', key: 'dead-7' })],
  ['preview: discard every dead row', '/dlq/preview', new URLSearchParams({ action: 'discard' })],
];
const pageRows: Array<[string, number, number, number]> = [];
const pageResults: Record<string, { firstMs: number; medianMs: number; maxMs: number }> = {};
for (const [name, path, body] of pages) {
  // The first fetch apart: it pays for cold pages and plans, what an operator opening the page sees first.
  const first = await timed(path, body, csrf);
  const ms: number[] = [];
  for (let i = 0; i < flags.fetches; i++) ms.push(await timed(path, body, csrf));
  const sum = summarize(ms);
  pageRows.push([name, first, sum.median, sum.max]);
  pageResults[name] = { firstMs: first, medianMs: sum.median, maxMs: sum.max };
}
printTable(
  `Console pages with ${flags.pending} pending and ${flags.dead} dead rows (target < 500 ms)`,
  ['page', 'first ms', `median of ${flags.fetches} ms`, 'worst ms'],
  pageRows,
);

// The drain: the timed pending rows become history (published two to three hours ago, as history is:
// marked all at once "now", they made every count of the last minute, and the charts' current minute,
// read a million rows during the first trials); the dead ones stay.
await db.pool.query(publishPendingSql(s, `p.key LIKE 'p-%'`, `now() - interval '2 hours' - (seq % 3600) * interval '1 second'`));
await db.pool.query(`VACUUM ANALYZE ${outboxTables(s)}`);

type Mode = 'none' | 'beside' | 'inRelay';

/** bench/lib/console-tabs.js in a process of its own; resolves once it prints `ready <url>`. */
async function tabsProcess(
  args: string[],
): Promise<{ url: string; pid: number; stop: () => Promise<{ refreshes: number; failed: number }> }> {
  const script = fileURLToPath(new URL('../lib/console-tabs.js', import.meta.url));
  const child = spawn(process.execPath, [script, ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.on('data', (b: Buffer) => {
    out += b.toString();
  });
  const exited = once(child, 'exit');
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited;
    const last = out.trim().split('\n').at(-1) ?? '';
    if (!last.startsWith('{')) throw new Error(`console-tabs ended with code ${child.exitCode} and printed no counts: ${last}`);
    return JSON.parse(last) as { refreshes: number; failed: number };
  };
  try {
    await until(() => /^ready /m.test(out) || child.exitCode !== null, 'the console tabs process to start', 30_000);
    if (child.exitCode !== null) throw new Error(`console-tabs exited with code ${child.exitCode}`);
  } catch (err) {
    child.kill('SIGKILL');
    throw err;
  }
  return { url: /^ready (\S+)/m.exec(out)?.[1] ?? '', pid: child.pid as number, stop };
}

/** Waits until a console has read its first numbers (its overview shows their age). */
async function warm(url: string): Promise<void> {
  await until(
    async () =>
      (await (await fetch(`${url}/?fragment=1`, { headers: AUTH, signal: AbortSignal.timeout(10_000) })).text()).includes('id="asof"'),
    `the console at ${url} to read its first numbers`,
    120_000,
  );
}

// Both consoles start now, on the outbox the trials drain, and are warmed before them: the page timings'
// console last read its numbers over a million pending rows (seconds), so its next read would be minutes
// away and its trials would barely read at all. `ferry console` beside the relay is one process for
// every trial, as an operator's console runs for days.
await console_.close();
const inRelay = await serveBenchConsole(db.url, db.schema);
const beside = await tabsProcess(['--tabs', '0', '--database-url', db.url, '--schema', db.schema, '--refresh-ms', '5000']);

/** Each trial's PostgreSQL CPU seconds of a console's own backends (application_name ferry-console). */
const consoleCpu: Record<Exclude<Mode, 'none'>, number[]> = { beside: [], inRelay: [] };
const drainSeconds: Record<Mode, number[]> = { none: [], beside: [], inRelay: [] };

/**
 * Tabs refreshing the overview and the blocked keys every second until stopped, in a process of their
 * own (browsers never share the relay's event loop): `beside`, against `ferry console` beside the
 * relay; `inRelay`, against the console this process serves (the relay's own process: `ferry relay`
 * serving the console). Returns the refreshes made.
 */
async function refreshing(mode: Exclude<Mode, 'none'>): Promise<{ stop: () => Promise<number> }> {
  const tabs = await tabsProcess(['--tabs', String(flags.tabs), '--console-url', mode === 'beside' ? beside.url : inRelay.url]);
  const self = { pid: process.pid, cpuSeconds: () => 0 };
  const meter = await cpuMeter(db.pool, [mode === 'beside' ? { pid: beside.pid, cpuSeconds: () => 0 } : self], {
    sampleMs: 500,
    applicationName: 'ferry-console',
  });
  return {
    stop: async () => {
      consoleCpu[mode].push((await meter.stop()).postgresSeconds);
      const r = await tabs.stop();
      if (r.failed > 0) failures.push(`${r.failed} tab refresh(es) failed (${mode})`);
      return r.refreshes;
    },
  };
}

const drained: Record<Mode, number[]> = { none: [], beside: [], inRelay: [] };
let run = 0;
let refreshes = 0;
try {
  await warm(beside.url);
  await warm(inRelay.url);
  for (let t = 0; t < flags.trials; t++) {
    // The outbox grows by a drain per trial and each drain leaves dead tuples behind: each trial starts
    // vacuumed, and every other trial runs the modes in reverse, so a drift over the run weighs on each
    // mode alike.
    const modes: Mode[] = t % 2 === 0 ? ['none', 'beside', 'inRelay'] : ['inRelay', 'beside', 'none'];
    for (const mode of modes) {
      await db.pool.query(`VACUUM ${outboxTables(s)}`);
      const stream = await createTestStream({ prefix: 'benchconsole', storage: 'file' });
      let load: { stop: () => Promise<number> } | undefined;
      try {
        load = mode === 'none' ? undefined : await refreshing(mode);
        const started = performance.now();
        const rate = await relayDrain(
          db.pool,
          db.schema,
          { databaseUrl: db.url, schema: db.schema, nats: { servers: natsUrl() } },
          { count: flags.drain, keys: 1000, keyPrefix: `d${run++}-`, subject: `${stream.prefix}.orders` },
        );
        drainSeconds[mode].push((performance.now() - started) / 1000);
        drained[mode].push(rate);
      } finally {
        if (load) refreshes += await load.stop();
        await stream.close();
      }
    }
  }
} finally {
  await beside.stop().catch((err: Error) => failures.push(err.message));
  await inRelay.close();
  await db.close();
}

const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
const result = {
  pending: flags.pending,
  dead: flags.dead,
  fetches: flags.fetches,
  pages: pageResults,
  failures,
  slowestPageMs: Math.max(...Object.values(pageResults).map((p) => Math.max(p.maxMs, p.firstMs))),
  drain: {
    rows: flags.drain,
    tabs: flags.tabs,
    refreshes,
    withoutConsole: summarize(drained.none),
    consoleBeside: summarize(drained.beside),
    consoleInRelay: summarize(drained.inRelay),
    /** The consoles' own PostgreSQL backends: CPU seconds per second of drain (a share of one core). */
    consoleCpuShare: {
      beside: sum(consoleCpu.beside) / sum(drainSeconds.beside),
      inRelay: sum(consoleCpu.inRelay) / sum(drainSeconds.inRelay),
    },
  },
  /** `ferry console` in its own process beside the relay. */
  drainRatio: summarize(drained.beside).median / summarize(drained.none).median,
  /** The console served by the relay's own process (`ferry relay` serving it). */
  drainRatioInRelay: summarize(drained.inRelay).median / summarize(drained.none).median,
};
printTable(
  `Relay drain of ${flags.drain} rows (${flags.dead} dead rows present), without and with ${flags.tabs} tabs refreshing every second (target ≥ 0.95×)`,
  ['', 'ev/s (median)', 'ratio'],
  [
    ['without the console', result.drain.withoutConsole.median, 1],
    ['ferry console beside the relay', result.drain.consoleBeside.median, result.drainRatio],
    ['console served by the relay process', result.drain.consoleInRelay.median, result.drainRatioInRelay],
  ],
);
console.log(
  `the consoles' own PostgreSQL CPU during their trials: ${(result.drain.consoleCpuShare.beside * 100).toFixed(2)} % of a core beside the relay, ${(result.drain.consoleCpuShare.inRelay * 100).toFixed(2)} % in its process`,
);
if (failures.length > 0) console.log(`${failures.length} request(s) failed:\n  ${failures.join('\n  ')}`);
console.log(`wrote ${writeResult('console-load', result)}`);
