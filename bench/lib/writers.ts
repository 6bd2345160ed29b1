import type pg from 'pg';
import { sleep } from './args.js';

/**
 * Runs `writers` concurrent loops for `seconds`; each loop calls
 * `once(writer, i)` back to back (i = writer, writer + writers, …, so no two
 * calls share an i). Returns completed calls per second.
 */
export async function loopWriters(writers: number, seconds: number, once: (writer: number, i: number) => Promise<void>): Promise<number> {
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
  return count / ((performance.now() - started) / 1000);
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
  const clients = await Promise.all(Array.from({ length: writers }, () => pool.connect()));
  try {
    return await loopWriters(writers, seconds, async (w, i) => {
      const c = clients[w] as pg.PoolClient;
      await c.query('BEGIN');
      await step(c, i);
      await c.query('COMMIT');
    });
  } finally {
    for (const c of clients) c.release();
  }
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
