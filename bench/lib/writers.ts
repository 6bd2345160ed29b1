import type pg from 'pg';
import { sleep } from './args.js';
import { cpuSecondsOf } from './proc.js';
import { summarize } from './stats.js';

/**
 * Runs `writers` concurrent loops for `seconds`; each loop calls
 * `once(writer, i)` back to back (i = writer, writer + writers, …, so no two
 * calls share an i). Returns completed calls per second.
 */
export async function loopWriters(writers: number, seconds: number, once: (writer: number, i: number) => Promise<void>): Promise<number> {
  const { count, elapsed } = await countWriters(writers, seconds, once);
  return count / elapsed;
}

/** `loopWriters`, returning the calls completed and the seconds they took. */
async function countWriters(
  writers: number,
  seconds: number,
  once: (writer: number, i: number) => Promise<void>,
): Promise<{ count: number; elapsed: number }> {
  const deadline = performance.now() + seconds * 1000;
  let count = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: writers }, async (_, w) => {
      let i = w;
      while (performance.now() < deadline) {
        await once(w, i);
        count++;
        i += writers;
      }
    }),
  );
  return { count, elapsed: (performance.now() - started) / 1000 };
}

/**
 * `loopWriters` on node-postgres: one client per writer, checked out for the
 * whole run, each call `BEGIN`, `step`, `COMMIT`. Returns transactions per second.
 */
export async function loopNodePostgresWriters(
  pool: pg.Pool,
  writers: number,
  seconds: number,
  step: (client: pg.PoolClient, i: number) => Promise<void>,
): Promise<number> {
  return (await meteredNodePostgresWriters(pool, writers, seconds, step)).perSecond;
}

/** What `meteredNodePostgresWriters` measured. */
export interface MeteredWriters {
  /** Transactions per second. */
  perSecond: number;
  /** This process's CPU (user + system) per transaction, µs: the writers' Node work, node-postgres included. */
  clientMicros: number;
  /** The writers' PostgreSQL backends' CPU per transaction, µs (/proc: PostgreSQL must run on this host). */
  backendMicros: number;
}

/**
 * `loopNodePostgresWriters`, also metering CPU per transaction: this
 * process's (`process.cpuUsage`) and the writers' backends' (their pids asked
 * once the clients are checked out, /proc read before and after).
 */
export async function meteredNodePostgresWriters(
  pool: pg.Pool,
  writers: number,
  seconds: number,
  step: (client: pg.PoolClient, i: number) => Promise<void>,
): Promise<MeteredWriters> {
  const clients = await Promise.all(Array.from({ length: writers }, () => pool.connect()));
  try {
    const pids = await Promise.all(
      clients.map(async (c) => (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid ?? 0),
    );
    const backends = () => pids.reduce((sum, pid) => sum + (cpuSecondsOf(pid) ?? Number.NaN), 0);
    const backendBefore = backends();
    const clientBefore = process.cpuUsage();
    const { count, elapsed } = await countWriters(writers, seconds, async (w, i) => {
      const c = clients[w] as pg.PoolClient;
      await c.query('BEGIN');
      await step(c, i);
      await c.query('COMMIT');
    });
    const client = process.cpuUsage(clientBefore);
    const backend = backends() - backendBefore;
    return {
      perSecond: count / elapsed,
      clientMicros: (client.user + client.system) / count,
      backendMicros: (backend * 1e6) / count,
    };
  } finally {
    for (const c of clients) c.release();
  }
}

/** Medians over trials of CPU per transaction, µs: client + backends together, and each apart. */
export function medianCpu(trials: readonly MeteredWriters[]): { micros: number; client: number; backend: number } {
  const median = (f: (m: MeteredWriters) => number) => summarize(trials.map(f)).median;
  return {
    micros: median((m) => m.clientMicros + m.backendMicros),
    client: median((m) => m.clientMicros),
    backend: median((m) => m.backendMicros),
  };
}

/**
 * Open loop: calls `commitOne` on a fixed schedule, one call per `perCall`
 * events at `rate` events per second, for `seconds`, whatever happened to the
 * earlier calls (a slow commit does not delay the next one); resolves when
 * every call has settled.
 */
export async function openLoop(rate: number, perCall: number, seconds: number, commitOne: () => Promise<void>): Promise<void> {
  const start = performance.now();
  const end = start + seconds * 1000;
  const inflight = new Set<Promise<void>>();
  for (let k = 0; ; k++) {
    const due = start + (k * perCall * 1000) / rate;
    if (due >= end) break;
    const wait = due - performance.now();
    if (wait > 1) await sleep(wait);
    const p: Promise<void> = commitOne().finally(() => inflight.delete(p));
    inflight.add(p);
  }
  await Promise.all(inflight);
}
