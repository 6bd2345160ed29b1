import { foreignTables, foreignTablesError, quoteIdentifier } from '@ferry/core';
import { type ConnectionOptions, connect, type NatsConnection } from '@nats-io/transport-node';
import { type Command, CommanderError, Option } from 'commander';
import pg from 'pg';
import { natsConnectOptions, type RelayFlags } from './commands/relay.js';
import { databaseUrlOption, type NatsFlags, redactNatsUrls, resolveDatabaseUrl, schemaOption } from './config.js';

export { addNatsOptions } from './config.js';

import type { CommandContext } from './context.js';
import { lockNamespace } from './lane-leaser.js';

/** The flags the operator commands (status, replay, doctor, verify) share. */
export interface OpsFlags {
  databaseUrl?: string;
  schema: string;
  json?: boolean;
}

export interface OpsNatsFlags extends OpsFlags, NatsFlags {}

/** `--database-url`, `--schema` and `--json`. */
export function addDatabaseOptions(cmd: Command): Command {
  return cmd.addOption(databaseUrlOption()).addOption(schemaOption()).addOption(new Option('--json', 'print the result as JSON'));
}

/** `connect()` options from the NATS flags (the same rules as `ferry relay`). */
export function opsNatsOptions(flags: OpsNatsFlags, name: string): ConnectionOptions {
  return { ...natsConnectOptions(flags as unknown as RelayFlags), name, maxReconnectAttempts: 0, timeout: 5000 };
}

export async function connectNats(flags: OpsNatsFlags, name: string): Promise<NatsConnection> {
  const options = opsNatsOptions(flags, name);
  try {
    return await connect(options);
  } catch (err) {
    throw new Error(
      `NATS at ${redactNatsUrls(flags.natsUrl).join(',')} is not reachable (${(err as Error).message}): start it or pass --nats-url`,
      {
        cause: err,
      },
    );
  }
}

/** A small pool for one command run; `application_name` says which. */
export function opsPool(flags: OpsFlags, ctx: CommandContext, applicationName: string): pg.Pool {
  const pool = new pg.Pool({
    connectionString: resolveDatabaseUrl(flags.databaseUrl, ctx.env),
    max: 2,
    application_name: applicationName,
    connectionTimeoutMillis: 5000,
  });
  pool.on('error', () => {});
  return pool;
}

/** Fails with the fix when the outbox tables of `schema` are missing or are not Ferry's. */
export async function requireOutbox(pool: pg.Pool, schema: string): Promise<void> {
  const foreign = await foreignTables(pool, schema);
  if (foreign.length > 0) throw foreignTablesError(schema, foreign); // exit 3, before any query on them
  const { rows } = await pool.query<{ t: string | null }>('SELECT to_regclass($1) AS t', [`${quoteIdentifier(schema)}.outbox`]);
  if (!rows[0]?.t) throw new Error(`no outbox table in schema "${schema}": run ferry migrate --schema ${schema} first`);
}

export interface RelayInstance {
  /** The relay's instance id (from its lease connection's application_name), or `pid:<backend pid>`. */
  instance: string;
  /** PostgreSQL backend pid of the lease connection (not the relay's process: see `relayPid`). */
  pid: number;
  /** The relay process's own pid and host, or null for a relay older than this field. */
  relayPid: number | null;
  host: string | null;
  applicationName: string;
  clientAddr: string | null;
  /** When the lease connection was opened. */
  since: string | null;
  /** Lanes this instance leases, ascending. */
  lanes: number[];
}

/**
 * Live relay instances of a schema and the lanes each leases, from `pg_locks`:
 * an instance holds the advisory lock `(instance namespace, its random key)`
 * on its lease connection, and each lane as `(lane namespace, lane)` on the
 * same connection (see lane-leaser.ts), so both share a backend pid.
 */
export async function relayInstances(pool: pg.Pool, schema: string): Promise<RelayInstance[]> {
  const { rows } = await pool.query<{
    pid: number;
    application_name: string | null;
    client_addr: string | null;
    backend_start: Date | null;
    lanes: number[];
  }>(
    `SELECT i.pid, a.application_name, a.client_addr::text AS client_addr, a.backend_start,
            coalesce((SELECT array_agg(l.objid::int ORDER BY l.objid) FROM pg_locks l
                       WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = $2::int::oid
                         AND l.pid = i.pid AND l.database = i.database), '{}') AS lanes
       FROM pg_locks i
       LEFT JOIN pg_stat_activity a ON a.pid = i.pid
      WHERE i.locktype = 'advisory' AND i.granted AND i.objsubid = 2 AND i.classid = $1::int::oid
        AND i.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      ORDER BY a.backend_start, i.pid`,
    [lockNamespace(`ferry:relays:${schema}`), lockNamespace(`ferry:lanes:${schema}`)],
  );
  return rows.map((r) => {
    const app = r.application_name ?? '';
    const m = /^.*:([0-9a-f]+):lease(?::(\d+)@(.*))?$/.exec(app);
    return {
      instance: m?.[1] ?? `pid:${r.pid}`,
      pid: r.pid,
      relayPid: m?.[2] ? Number(m[2]) : null,
      host: m?.[3] || null,
      applicationName: app,
      clientAddr: r.client_addr,
      since: r.backend_start?.toISOString() ?? null,
      lanes: r.lanes.map(Number),
    };
  });
}

/** Ends the command with this exit code (after its output), e.g. `ferry doctor` with the number of problems. */
export function exitWith(code: number, message = ''): never {
  throw new CommanderError(code, 'ferry.exit', message);
}

/** Routes a subcommand's help and errors to the context, like the built-in commands. */
export function routeOutput(cmd: Command, ctx: CommandContext): Command {
  return cmd.configureOutput({ writeOut: (s) => ctx.out(s.trimEnd()), writeErr: (s) => ctx.err(s.trimEnd()) });
}
