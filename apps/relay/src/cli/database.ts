import { ConfigError, foreignTables, foreignTablesError, quoteIdentifier } from '@ferry/core';
import pg from 'pg';
import type { CommandContext } from '../context.js';
import { NotMigratedError } from '../errors.js';
import { OUTBOX_TABLE_SQL } from '../sql/outbox-table.js';
import { CLI_DEFAULTS } from './defaults.js';
import { parseDatabaseUrl } from './flag-parsers.js';
import type { DatabaseFlags } from './shared-options.js';

/** The database URL from the flag, FERRY_DATABASE_URL or DATABASE_URL. */
export function resolveDatabaseUrl(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  const [source, url] =
    flag !== undefined
      ? ['--database-url', flag]
      : env.FERRY_DATABASE_URL !== undefined
        ? ['FERRY_DATABASE_URL', env.FERRY_DATABASE_URL]
        : ['DATABASE_URL', env.DATABASE_URL];
  if (!url) {
    throw new ConfigError('--database-url', 'no database: pass --database-url, or set FERRY_DATABASE_URL or DATABASE_URL');
  }
  try {
    return parseDatabaseUrl(url);
  } catch (err) {
    // The parser names the flag; a value from a variable is named by its variable.
    const message = (err as Error).message.replace(/^--database-url/, source);
    throw new ConfigError('--database-url', message, { cause: err });
  }
}

/** A small pool for one command run; `application_name` says which. */
export function commandPool(flags: Pick<DatabaseFlags, 'databaseUrl'>, ctx: CommandContext, applicationName: string): pg.Pool {
  const pool = new pg.Pool({
    connectionString: resolveDatabaseUrl(flags.databaseUrl, ctx.env),
    max: 2,
    application_name: applicationName,
    connectionTimeoutMillis: CLI_DEFAULTS.connectTimeoutMs,
  });
  pool.on('error', () => {});
  return pool;
}

/** Fails with the fix when the outbox tables of `schema` are missing or are not Ferry's. */
export async function requireOutbox(pool: pg.Pool, schema: string): Promise<void> {
  const foreign = await foreignTables(pool, schema);
  if (foreign.length > 0) throw foreignTablesError(schema, foreign); // exit 3, before any query on them
  const { rows } = await pool.query<{ t: string | null }>(OUTBOX_TABLE_SQL, [`${quoteIdentifier(schema)}.outbox`]);
  if (!rows[0]?.t) throw new NotMigratedError(`no outbox table in schema "${schema}": run ferry migrate --schema ${schema} first`);
}
