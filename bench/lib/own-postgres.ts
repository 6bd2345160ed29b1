/**
 * A PostgreSQL cluster of a benchmark's own: `initdb` into a fresh folder and
 * `pg_ctl start` on a free loopback port, run as the `postgres` user, with
 * PostgreSQL's defaults (autovacuum on). The machine's shared server is
 * configured for tests (autovacuum off on this one), so a figure that depends
 * on PostgreSQL's own upkeep, such as the soak's dead tuples, cannot be read
 * off it; and it is never reconfigured. Stopped by the postmaster's pid.
 */
import { execFileSync } from 'node:child_process';
import { chownSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { freePort, waitFor } from '@ferry/testkit';
import pg from 'pg';

export interface OwnPostgres {
  /** `postgres://postgres@127.0.0.1:<port>/postgres` */
  readonly url: string;
  readonly port: number;
  /** Fast shutdown (SIGINT to the postmaster), then the folder is removed. */
  stop(): Promise<void>;
}

/** The newest installed PostgreSQL's bin folder (Debian's layout), or the one `pg_config` names. */
function binDir(): string {
  try {
    const versions = readdirSync('/usr/lib/postgresql').sort((a, b) => Number(a) - Number(b));
    if (versions.length) return `/usr/lib/postgresql/${versions.at(-1)}/bin`;
  } catch {}
  return execFileSync('pg_config', ['--bindir'], { encoding: 'utf8' }).trim();
}

/** Runs a PostgreSQL program as `postgres` (initdb and the server refuse root). */
function asPostgres(program: string, args: string[]): void {
  const root = userInfo().uid === 0;
  execFileSync(root ? 'runuser' : program, root ? ['-u', 'postgres', '--', program, ...args] : args, { stdio: 'pipe' });
}

export async function startOwnPostgres(settings: Record<string, string> = {}): Promise<OwnPostgres> {
  const bin = binDir();
  const dir = mkdtempSync(join(tmpdir(), 'ferry-bench-pg-'));
  if (userInfo().uid === 0) {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    chownSync(dir, uid, gid);
  }
  const data = join(dir, 'data');
  const port = await freePort();
  asPostgres(join(bin, 'initdb'), ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync']);
  const options = [
    `-p ${port}`,
    '-c listen_addresses=127.0.0.1',
    `-c unix_socket_directories=${dir}`,
    '-c max_connections=200',
    ...Object.entries(settings).map(([k, v]) => `-c ${k}=${v}`),
  ].join(' ');
  asPostgres(join(bin, 'pg_ctl'), ['-D', data, '-o', options, '-l', join(dir, 'server.log'), '-w', '-t', '60', 'start']);
  const pid = Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0]);
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  const probe = new pg.Client({ connectionString: url });
  await probe.connect();
  await probe.end();
  return {
    url,
    port,
    async stop() {
      try {
        process.kill(pid, 'SIGINT');
        await waitFor(
          () => {
            try {
              process.kill(pid, 0);
              return false;
            } catch {
              return true;
            }
          },
          { what: `PostgreSQL ${pid} to stop`, timeoutMs: 60_000 },
        );
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}
