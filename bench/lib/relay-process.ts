/**
 * `ferry relay` as users start it: a child process running apps/relay/bin/ferry.js
 * with the connection flags only (database URL, schema, NATS URL) and its own
 * --http-port (so two instances can run side by side and /readyz says when its
 * lanes are leased). Every tuning flag stays at its default unless the caller
 * passes one in `extraArgs`. Also the CPU of the process and of the PostgreSQL
 * backends serving it, from /proc (Linux only).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { freePort } from '@ferry/testkit';
import type pg from 'pg';
import { sleep, until } from './args.js';
import { cpuSecondsOf, localPortsOf, startTicksOf } from './proc.js';

const FERRY_BIN = fileURLToPath(new URL('../../../apps/relay/bin/ferry.js', import.meta.url));

export interface RelayProcess {
  readonly pid: number;
  readonly port: number;
  /** The lanes it leases now (from /readyz), 0 when not ready. */
  lanes(): Promise<number>;
  /** utime + stime of the relay process, seconds. */
  cpuSeconds(): number;
  /** SIGTERM, wait for the clean exit (SIGKILL after 15 s). */
  stop(): Promise<void>;
}

export interface RelayProcessOptions {
  databaseUrl: string;
  schema: string;
  natsUrl: string;
  /** Anything else, e.g. ['--no-listen']; empty for the defaults a user gets. */
  extraArgs?: string[];
  /** Node's own flags before the script (e.g. ['--import', hook]) and extra environment: for instrumenting the process. */
  nodeArgs?: string[];
  env?: NodeJS.ProcessEnv;
}

/** The command line `startRelayProcess` runs, for the reports (without the URLs). */
export function relayCommandLine(extraArgs: string[] = []): string {
  return ['ferry relay --database-url … --schema … --nats-url … --http-port …', ...extraArgs].join(' ');
}

export async function startRelayProcess(o: RelayProcessOptions): Promise<RelayProcess> {
  const port = await freePort();
  const args = [
    ...(o.nodeArgs ?? []),
    FERRY_BIN,
    'relay',
    '--database-url',
    o.databaseUrl,
    '--schema',
    o.schema,
    '--nats-url',
    o.natsUrl,
    '--http-port',
    String(port),
    ...(o.extraArgs ?? []),
  ];
  // stdout (the info-level JSON log a user ships somewhere) goes to /dev/null; warnings and errors show.
  const child: ChildProcess = spawn(process.execPath, args, {
    stdio: ['ignore', 'ignore', 'inherit'],
    ...(o.env ? { env: { ...process.env, ...o.env } } : {}),
  });
  const pid = child.pid;
  if (pid === undefined) throw new Error('could not start ferry relay');
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const lanes = async (): Promise<number> => {
    try {
      const res = await fetch(`http://127.0.0.1:${port}/readyz`);
      const body = (await res.json()) as { ready?: boolean; lanes?: number };
      return res.status === 200 && body.ready ? (body.lanes ?? 0) : 0;
    } catch {
      return 0;
    }
  };
  const stop = async () => {
    if (child.exitCode !== null) return;
    child.kill('SIGTERM');
    await Promise.race([exited, sleep(15_000)]);
    if (child.exitCode === null) child.kill('SIGKILL');
  };
  try {
    await until(async () => child.exitCode === null && (await lanes()) > 0, `ferry relay (pid ${pid}) to be ready`, 60_000);
  } catch (err) {
    await stop();
    throw err;
  }
  return { pid, port, lanes, cpuSeconds: () => cpuSecondsOf(pid) ?? 0, stop };
}

/**
 * Starts `count` relay processes and waits until together they lease all
 * `totalLanes` lanes, each at least one (lanesPerInstance auto: fair shares).
 */
export async function startRelayProcesses(count: number, totalLanes: number, o: RelayProcessOptions): Promise<RelayProcess[]> {
  const relays: RelayProcess[] = [];
  try {
    for (let i = 0; i < count; i++) relays.push(await startRelayProcess(o));
    await until(
      async () => {
        const owned = await Promise.all(relays.map((r) => r.lanes()));
        return owned.every((n) => n > 0) && owned.reduce((a, b) => a + b, 0) === totalLanes;
      },
      `${count} relay(s) to share ${totalLanes} lanes`,
      60_000,
    );
  } catch (err) {
    await Promise.all(relays.map((r) => r.stop()));
    throw err;
  }
  return relays;
}

/** PostgreSQL backend pids serving a process's connections (matched by client port). */
export async function backendsOf(pool: pg.Pool, pid: number, applicationName?: string): Promise<number[]> {
  const ports = localPortsOf(pid);
  if (ports.length === 0) return [];
  const { rows } = await pool.query<{ pid: number }>(
    `SELECT pid FROM pg_stat_activity WHERE client_port = ANY($1::int[]) AND client_addr IN ('127.0.0.1', '::1')
        AND ($2::text IS NULL OR application_name = $2)`,
    [ports, applicationName ?? null],
  );
  return rows.map((r) => r.pid);
}

/**
 * CPU meter over some processes and their PostgreSQL backends (only those
 * with `applicationName`, when given): `stop()` after the work; seconds of
 * each side. The backends are found again every `sampleMs` (from the
 * processes' sockets), and each one's CPU is read at each sample: a backend
 * that appears during the work (a pool growing) counts from 0, and one that
 * exits during it (a pool's idle timeout, a connection replaced) keeps the
 * CPU of its last sample. Before, only the backends alive at start and at
 * stop were read, so a connection that came and went in between was not
 * counted at all. What a backend spends after its last sample and before it
 * exits (at most `sampleMs` of its time) is still missed. A backend is named
 * by its pid and start time, so a reused pid is another backend.
 */
export async function cpuMeter(
  pool: pg.Pool,
  relays: ReadonlyArray<Pick<RelayProcess, 'pid' | 'cpuSeconds'>>,
  { sampleMs = 250, applicationName }: { sampleMs?: number; applicationName?: string } = {},
) {
  const first = new Map<string, number>();
  const last = new Map<string, number>();
  const pids = new Map<string, number>();
  const read = (id: string, pid: number): void => {
    const cpu = cpuSecondsOf(pid);
    if (cpu === undefined || `${pid}@${startTicksOf(pid)}` !== id) return; // gone, or the pid is another process's now
    last.set(id, Math.max(cpu, last.get(id) ?? 0));
  };
  const sample = async (initial: boolean) => {
    for (const r of relays) {
      for (const p of await backendsOf(pool, r.pid, applicationName)) {
        const id = `${p}@${startTicksOf(p)}`;
        if (!first.has(id)) {
          const cpu = cpuSecondsOf(p);
          if (cpu === undefined) continue;
          first.set(id, initial ? cpu : 0);
          pids.set(id, p);
        }
      }
    }
    // Every backend seen so far, even when the process's sockets no longer show it (closing).
    for (const [id, p] of pids) read(id, p);
  };
  await sample(true);
  const relay0 = relays.map((r) => r.cpuSeconds());
  // One sample after another (never queued behind a slow one), and never keeping the process alive.
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> = Promise.resolve();
  const next = () => {
    timer = setTimeout(() => {
      running = sample(false)
        .catch(() => {})
        .finally(() => {
          if (!stopped) next();
        });
    }, sampleMs);
    timer.unref();
  };
  next();
  return {
    async stop(): Promise<{ relaySeconds: number; postgresSeconds: number; backends: number }> {
      stopped = true;
      clearTimeout(timer);
      await running;
      await sample(false);
      const relaySeconds = relays.reduce((sum, r, i) => sum + r.cpuSeconds() - (relay0[i] ?? 0), 0);
      let postgresSeconds = 0;
      for (const [id, from] of first) postgresSeconds += (last.get(id) ?? from) - from;
      return { relaySeconds, postgresSeconds, backends: first.size };
    },
  };
}
