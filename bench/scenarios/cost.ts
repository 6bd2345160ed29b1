/**
 * Scenario 7, cost: CPU seconds per 1,000 events of a `ferry relay` child
 * process draining a backlog, and of the PostgreSQL backends serving it (the
 * backends whose client ports belong to the child), from utime + stime in
 * /proc before and after. Baseline in the same run: the CPU this process
 * spends publishing the same messages raw (pipelined, one connection,
 * process.cpuUsage()). Linux only.
 *
 *   node bench/dist/scenarios/cost.js [--quick] [--events 30000] [--trials 2]
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { quoteIdentifier } from '@ferry/core';
import { createTestDatabase, createTestStream, freePort, natsUrl } from '@ferry/testkit';
import { numArg, sleep, until } from '../lib/args.js';
import { commitBacklog, makeRows, rawPublish } from '../lib/outbox.js';
import { cpuSecondsOf, localPortsOf } from '../lib/proc.js';
import { hasFlag, printTable, summarize, writeResult } from '../lib/stats.js';

const QUICK = hasFlag('quick');
const EVENTS = numArg('events', QUICK ? 3000 : 30_000);
const TRIALS = numArg('trials', QUICK ? 1 : 2);
const FERRY_BIN = fileURLToPath(new URL('../../../apps/relay/bin/ferry.js', import.meta.url));

const db = await createTestDatabase({ prefix: 'bench_cost', lanes: 16, max: 4 });
let run = 0;

/** PostgreSQL backend pids serving the child's connections. */
async function backendsOf(pid: number): Promise<number[]> {
  const ports = localPortsOf(pid);
  if (ports.length === 0) return [];
  const { rows } = await db.pool.query<{ pid: number }>(
    `SELECT pid FROM pg_stat_activity WHERE client_port = ANY($1::int[]) AND client_addr IN ('127.0.0.1', '::1')`,
    [ports],
  );
  return rows.map((r) => r.pid);
}

async function relayTrial(): Promise<{ relayCpuPer1k: number; pgCpuPer1k: number; eventsPerSec: number; backends: number }> {
  await db.pool.query(`TRUNCATE ${quoteIdentifier(db.schema)}.outbox`);
  const stream = await createTestStream({ prefix: 'benchcost' });
  const port = await freePort();
  const child: ChildProcess = spawn(
    process.execPath,
    [
      FERRY_BIN,
      'relay',
      '--database-url',
      db.url,
      '--schema',
      db.schema,
      '--nats-url',
      natsUrl(),
      '--no-maintenance',
      '--http-port',
      String(port),
      '--log-level',
      'warn',
    ],
    { stdio: ['ignore', 'ignore', 'inherit'] },
  );
  const pid = child.pid;
  if (pid === undefined) throw new Error('could not start ferry relay');
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    await until(
      async () => {
        try {
          return (await fetch(`http://127.0.0.1:${port}/readyz`)).status === 200;
        } catch {
          return false;
        }
      },
      'ferry relay to be ready',
      30_000,
    );
    await sleep(300);
    const pids0 = await backendsOf(pid);
    const relay0 = cpuSecondsOf(pid) ?? 0;
    const pg0 = new Map(pids0.map((p) => [p, cpuSecondsOf(p) ?? 0]));
    const t0 = await commitBacklog(db.pool, db.schema, {
      count: EVENTS,
      keys: 1000,
      keyPrefix: `c${run++}-`,
      subject: `${stream.prefix}.orders`,
    });
    await until(async () => {
      const { rows } = await db.pool.query(`SELECT 1 FROM ${quoteIdentifier(db.schema)}.outbox WHERE published_at IS NULL LIMIT 1`);
      return rows.length === 0;
    }, 'the relay to drain');
    const seconds = (performance.now() - t0) / 1000;
    const pids1 = await backendsOf(pid);
    const relay1 = cpuSecondsOf(pid) ?? relay0;
    let pg = 0;
    for (const p of new Set([...pids0, ...pids1])) pg += (cpuSecondsOf(p) ?? pg0.get(p) ?? 0) - (pg0.get(p) ?? 0);
    const stored = (await stream.jsm.streams.info(stream.name)).state.messages;
    if (stored !== EVENTS) throw new Error(`stream holds ${stored} messages, expected ${EVENTS}`);
    return {
      relayCpuPer1k: ((relay1 - relay0) * 1000) / EVENTS,
      pgCpuPer1k: (pg * 1000) / EVENTS,
      eventsPerSec: EVENTS / seconds,
      backends: new Set([...pids0, ...pids1]).size,
    };
  } finally {
    child.kill('SIGTERM');
    await Promise.race([exited, sleep(15_000)]);
    if (child.exitCode === null) child.kill('SIGKILL');
    await stream.close();
  }
}

async function rawTrial(): Promise<number> {
  const stream = await createTestStream({ prefix: 'benchcostraw' });
  try {
    const rows = makeRows({ count: EVENTS, keys: 1000, keyPrefix: `x${run++}-`, subject: `${stream.prefix}.orders` });
    const before = process.cpuUsage();
    await rawPublish(stream.nc, rows, 5000);
    const used = process.cpuUsage(before);
    return ((used.user + used.system) / 1e6 / EVENTS) * 1000;
  } finally {
    await stream.close();
  }
}

try {
  const relay: number[] = [];
  const pg: number[] = [];
  const raw: number[] = [];
  const rates: number[] = [];
  let backends = 0;
  for (let t = 0; t < TRIALS; t++) {
    const r = await relayTrial();
    relay.push(r.relayCpuPer1k);
    pg.push(r.pgCpuPer1k);
    rates.push(r.eventsPerSec);
    backends = r.backends;
    raw.push(await rawTrial());
  }
  const relayS = summarize(relay);
  const pgS = summarize(pg);
  const rawS = summarize(raw);
  const pct = (x: { spread: number }) => `±${(x.spread * 100).toFixed(0)}%`;
  printTable(
    `Cost: CPU seconds per 1,000 events, a ferry relay child draining ${EVENTS.toLocaleString('en')} events (median of ${TRIALS}; ${summarize(rates).median.toFixed(0)} ev/s)`,
    ['process', 'CPU s / 1k events', 'spread', 'vs raw publisher'],
    [
      ['raw pipelined publisher (baseline)', rawS.median, pct(rawS), '1.00'],
      ['ferry relay process', relayS.median, pct(relayS), (relayS.median / rawS.median).toFixed(2)],
      [`PostgreSQL backends of the relay (${backends})`, pgS.median, pct(pgS), (pgS.median / rawS.median).toFixed(2)],
    ],
  );
  const file = writeResult('cost', {
    scenario: 'cost',
    params: { events: EVENTS, trials: TRIALS, quick: QUICK },
    cpuSecondsPer1k: { relay: relayS, postgres: pgS, rawPublisher: rawS },
    relayVsRaw: relayS.median / rawS.median,
    drainPerSec: summarize(rates),
  });
  console.log(`wrote ${file}`);
} finally {
  await db.close();
}
process.exit(0);
