/**
 * What the lane leases cost PostgreSQL: the CPU (utime + stime from /proc, so PostgreSQL must run
 * on this host) of one lease connection's backend over `--seconds`, for
 * - before: the advisory-lock leaser's per-poll statement (a pg_locks count) every 500 ms;
 * - after: an idle relay with the defaults (counts every poll, a renewal every third of the term).
 * Results in docs/relay.md "Lease cost".
 *
 *   node bench/dist/scenarios/lease-cost.js [--seconds N]
 */
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { createRelay } from '@ferry/relay';
import { createTestDatabase, createTestStream } from '@ferry/testkit';
import pg from 'pg';
import { declareFlags, numArg } from '../lib/args.js';

declareFlags('node bench/dist/scenarios/lease-cost.js', 'PostgreSQL CPU of the lane leases, advisory locks against rows with a term.', {
  seconds: '<n> seconds measured for each (default 60)',
});

const SECONDS = numArg('seconds', 60);
const CLOCK_TICKS = 100; // getconf CLK_TCK on Linux

/** utime + stime of a local process in ms. */
function cpuMs(pid: number): number {
  const fields = (readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1] ?? '').split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS;
}

const db = await createTestDatabase({ prefix: 'bench_lease', lanes: 16 });
const stream = await createTestStream({ prefix: 'benchlease' });
try {
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  await c.query('SELECT pg_advisory_lock(1, 2)');
  const pid = (await c.query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0]?.p ?? 0;
  let t0 = cpuMs(pid);
  for (let i = 0; i < SECONDS * 2; i++) {
    await c.query(
      `SELECT count(DISTINCT objid)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2
          AND classid = $1::int::oid AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
      [1],
    );
    await sleep(500);
  }
  const before = (cpuMs(pid) - t0) / SECONDS;
  await c.end();

  const relay = createRelay({ databaseUrl: db.url, schema: db.schema, nats: { servers: stream.nc.getServer() }, maintenance: false });
  await relay.start();
  await sleep(2000);
  const { rows } = await db.pool.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE application_name LIKE $1', [
    `%${relay.instanceId}:lease%`,
  ]);
  const leasePid = rows[0]?.pid ?? 0;
  t0 = cpuMs(leasePid);
  await sleep(SECONDS * 1000);
  const after = (cpuMs(leasePid) - t0) / SECONDS;
  await relay.stop();
  process.stdout.write(
    `lease connection PostgreSQL CPU over ${SECONDS} s: advisory locks ${before.toFixed(2)} ms/s, rows with a term ${after.toFixed(2)} ms/s\n`,
  );
} finally {
  await stream.close();
  await db.close();
}
