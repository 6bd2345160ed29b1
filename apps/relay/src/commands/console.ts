import { readFileSync } from 'node:fs';
import { bossSchemaFor, ConfigError, OLD_BOSS_SCHEMA } from '@ferry/core';
import type { NatsConnection } from '@nats-io/transport-node';
import { Command, Option } from 'commander';
import pg from 'pg';
import { requireOutbox, resolveDatabaseUrl } from '../cli/database.js';
import { CLI_DEFAULTS } from '../cli/defaults.js';
import { parseHost, parseIntIn, parseSchema, validatorParser } from '../cli/flag-parsers.js';
import { connectNats } from '../cli/nats-connection.js';
import {
  addNatsOptions,
  addRetrySpanOptions,
  type DatabaseFlags,
  databaseUrlOption,
  type NatsFlags,
  type RetrySpanFlags,
  schemaOption,
} from '../cli/shared-options.js';
import { checkOperatorName } from '../console/operator-name.js';
import { type ConsoleOptions, startConsole } from '../console/server.js';
import type { CommandContext } from '../context.js';
import { isLoopbackAddress } from '../loopback-host.js';
import { RELAY_DEFAULTS } from '../relay-options.js';
import { runDoctor } from './doctor.js';

interface ConsoleFlags extends DatabaseFlags, NatsFlags, RetrySpanFlags {
  host: string;
  port: number;
  tokenFile?: string;
  basicAuthFile?: string;
  readOnly?: boolean;
  operator?: string;
  bossSchema?: string;
  oldBossSchema: string;
  statementTimeoutMs: number;
  refreshMs: number;
}

const RETRY_SPAN_LONG_FLAGS = new Set([
  '--poll-interval-ms',
  '--max-attempts',
  '--backoff-base-ms',
  '--backoff-max-ms',
  '--publish-timeout-ms',
]);

/** Shorter tokens are refused: the console's token guards actions that discard events. */
const MIN_TOKEN = 16;

const HELP_AFTER = `
Who gets in:
  It binds 127.0.0.1 by default: anyone on this host reads it, and actions need
  the token or credentials. Any other --host needs them for every page. Give a
  token (--token-file, or FERRY_CONSOLE_TOKEN; at least ${MIN_TOKEN} characters; send
  it as "Authorization: Bearer" or log in at /login) or basic-auth credentials
  (--basic-auth-file holding user:password, or FERRY_CONSOLE_BASIC_AUTH).
  --read-only offers no actions and accepts none; it works with a role holding
  only SELECT: ferry migrate --print-grants --role R --for console.
  Actions run as the database user: dlq retry/discard need the relay's grants,
  parked retry/discard the inbox's. With a shared token, each operator types
  a name at /login (or --operator sets it): the audit trail records it with
  "(token)", as a claim; basic auth records its user.
  The Streams page's doctor checks the duplicate window against the relay's
  retry settings, read from the relay's variables (FERRY_MAX_ATTEMPTS,
  FERRY_BACKOFF_BASE_MS, FERRY_BACKOFF_MAX_MS, FERRY_PUBLISH_TIMEOUT_MS,
  FERRY_POLL_INTERVAL_MS) when set.

Examples:
  ferry console                                    (http://127.0.0.1:9470)
  FERRY_CONSOLE_TOKEN=$(openssl rand -hex 24) ferry console --host 0.0.0.0
  ferry console --read-only --database-url postgres://ops_console@db/app`;

function readSecretFile(flag: string, file: string): string {
  try {
    return readFileSync(file, 'utf8').trim();
  } catch (err) {
    throw new ConfigError(flag, `cannot read ${flag} ${file}: ${(err as Error).message}`, { cause: err });
  }
}

/** The token and basic-auth credentials from their files or variables, checked. */
export function consoleCredentials(
  flags: Pick<ConsoleFlags, 'tokenFile' | 'basicAuthFile'>,
  env: NodeJS.ProcessEnv,
): { token?: string; basic?: { user: string; password: string } } {
  const token =
    flags.tokenFile !== undefined ? readSecretFile('--token-file', flags.tokenFile) : env.FERRY_CONSOLE_TOKEN?.trim() || undefined;
  const source = flags.tokenFile !== undefined ? '--token-file' : 'FERRY_CONSOLE_TOKEN';
  if (token !== undefined && token.length < MIN_TOKEN)
    throw new ConfigError(
      source,
      `the console token from ${source} has ${token.length} characters; give at least ${MIN_TOKEN} (openssl rand -hex 24)`,
    );
  const pair =
    flags.basicAuthFile !== undefined
      ? readSecretFile('--basic-auth-file', flags.basicAuthFile)
      : env.FERRY_CONSOLE_BASIC_AUTH?.trim() || undefined;
  let basic: { user: string; password: string } | undefined;
  if (pair !== undefined) {
    const at = pair.indexOf(':');
    const from = flags.basicAuthFile !== undefined ? '--basic-auth-file' : 'FERRY_CONSOLE_BASIC_AUTH';
    if (at < 1 || pair.length - at - 1 < 8)
      throw new ConfigError(from, `${from} must hold user:password, the password at least 8 characters`);
    basic = { user: pair.slice(0, at), password: pair.slice(at + 1) };
  }
  return { ...(token !== undefined ? { token } : {}), ...(basic ? { basic } : {}) };
}

/** What a console needs besides where it listens and who gets in, and how to let go of it. */
export interface OpenedConsole {
  options: Omit<ConsoleOptions, 'host' | 'port' | 'readOnly' | 'token' | 'basic'>;
  close(): Promise<void>;
}

/**
 * One of the console's pools: every statement bounded by `statementTimeoutMs`, a query by a second more
 * (the server's timeout speaks first), an idle transaction by five more. Pool errors (a dropped idle
 * connection) are not the console's to crash on; the next query reports them.
 */
function consolePool(connectionString: string, max: number, statementTimeoutMs: number): pg.Pool {
  const pool = new pg.Pool({
    connectionString,
    max,
    application_name: 'ferry-console',
    connectionTimeoutMillis: CLI_DEFAULTS.connectTimeoutMs,
    statement_timeout: statementTimeoutMs,
    query_timeout: statementTimeoutMs + 1000,
    idle_in_transaction_session_timeout: statementTimeoutMs + 5000,
  });
  pool.on('error', () => {});
  return pool;
}

/**
 * The console's pools (pages: --statement-timeout-ms; the shared status read and the actions: 30 s)
 * and NATS connection (without it, the streams and lag say why), for `ferry console` and `ferry relay --console`.
 */
export async function openConsole(
  flags: DatabaseFlags &
    NatsFlags &
    RetrySpanFlags & { bossSchema?: string; oldBossSchema?: string; statementTimeoutMs: number; refreshMs: number },
  ctx: CommandContext,
  who: string,
): Promise<OpenedConsole> {
  const databaseUrl = resolveDatabaseUrl(flags.databaseUrl, ctx.env);
  const pool = consolePool(databaseUrl, 4, flags.statementTimeoutMs);
  // The overview's exact counts and the actions (a preview or change may cover 100,000 rows) get longer.
  const longPool = consolePool(databaseUrl, 2, CLI_DEFAULTS.consoleLongStatementTimeoutMs);
  let nc: NatsConnection | undefined;
  let natsError: string | undefined;
  const close = async () => {
    await nc?.close().catch(() => {});
    await pool.end().catch(() => {});
    await longPool.end().catch(() => {});
  };
  try {
    await requireOutbox(pool, flags.schema);
    try {
      nc = await connectNats(flags, 'ferry-console');
    } catch (err) {
      natsError = (err as Error).message;
      ctx.err(`${who}: warning: NATS unreachable, the console shows no streams or consumer lag: ${natsError}`);
    }
  } catch (err) {
    await close();
    throw err;
  }
  return {
    options: {
      pool,
      longPool,
      schema: flags.schema,
      bossSchema: flags.bossSchema ?? bossSchemaFor(flags.schema),
      ...(flags.oldBossSchema !== undefined ? { oldBossSchema: flags.oldBossSchema } : {}),
      ...(nc ? { nc } : {}),
      ...(natsError ? { natsError } : {}),
      refreshMs: flags.refreshMs,
      doctor: () =>
        runDoctor(
          {
            ...flags,
            maxPayloadBytes: CLI_DEFAULTS.maxPayloadBytes,
            inboxMaxDeliver: CLI_DEFAULTS.inboxMaxDeliver,
            leaseTermMs: RELAY_DEFAULTS.leaseTermMs,
          },
          { ...ctx, out: () => {}, err: () => {} },
        ),
    },
    close,
  };
}

/** `ferry console`: the operator console in the browser, until SIGINT or SIGTERM. */
export function consoleCommand(ctx: CommandContext): Command {
  const cmd = addRetrySpanOptions(
    addNatsOptions(
      new Command('console')
        .description(
          'the operator console in the browser: relays, lanes, blocked keys, events, parked events; retry, discard, with previews and an audit trail',
        )
        .addOption(databaseUrlOption())
        .addOption(schemaOption()),
    ),
  );
  // The relay's retry flags feed only the Streams page's doctor (the duplicate window it checks):
  // read from the relay's own FERRY_* variables, and out of --help, which lists what the console is for.
  for (const option of cmd.options) if (RETRY_SPAN_LONG_FLAGS.has(option.long ?? '')) option.hideHelp();
  return cmd
    .addOption(
      new Option(
        '--host <address>',
        'address to listen on (anything but loopback needs a token or credentials; on loopback only Host 127.0.0.1, [::1] or localhost with the port is answered, 421 otherwise)',
      )
        .env('FERRY_CONSOLE_HOST')
        .default('127.0.0.1')
        .argParser(parseHost),
    )
    .addOption(
      new Option('--port <n>', 'port to listen on (0: any free port, printed)')
        .env('FERRY_CONSOLE_PORT')
        .default(CLI_DEFAULTS.consolePort)
        .argParser(parseIntIn(0, 65_535)),
    )
    .addOption(new Option('--token-file <file>', 'file holding the console token (or FERRY_CONSOLE_TOKEN)').env('FERRY_CONSOLE_TOKEN_FILE'))
    .addOption(
      new Option('--basic-auth-file <file>', 'file holding user:password for basic auth (or FERRY_CONSOLE_BASIC_AUTH)').env(
        'FERRY_CONSOLE_BASIC_AUTH_FILE',
      ),
    )
    .addOption(
      new Option(
        '--operator <name>',
        "the name recorded in the audit trail with the token's actions (the login form's default; a claim, not an identity)",
      )
        .env('FERRY_CONSOLE_OPERATOR')
        .argParser(validatorParser(checkOperatorName)),
    )
    .addOption(new Option('--read-only', 'offer no actions and accept none (a SELECT-only role is enough)').env('FERRY_CONSOLE_READ_ONLY'))
    .addOption(
      new Option('--boss-schema <name>', "the inbox's pg-boss schema, where its parked events are (default <schema>_boss)")
        .env('FERRY_BOSS_SCHEMA')
        .argParser(parseSchema),
    )
    .addOption(
      new Option('--old-boss-schema <name>', 'where earlier inbox releases parked: the Parked page names events left there')
        .env('FERRY_OLD_BOSS_SCHEMA')
        .default(OLD_BOSS_SCHEMA)
        .argParser(parseSchema),
    )
    .addOption(
      new Option(
        '--statement-timeout-ms <ms>',
        "server-side statement_timeout of each page's queries (100-60000); the overview's shared status read and the actions get 30 s",
      )
        .env('FERRY_CONSOLE_STATEMENT_TIMEOUT_MS')
        .default(CLI_DEFAULTS.consoleStatementTimeoutMs)
        .argParser(parseIntIn(100, 60_000)),
    )
    .addOption(
      new Option('--refresh-ms <ms>', 'how often the overview refreshes itself (1000-600000)')
        .env('FERRY_CONSOLE_REFRESH_MS')
        .default(CLI_DEFAULTS.consoleRefreshMs)
        .argParser(parseIntIn(1000, 600_000)),
    )
    .addHelpText('after', HELP_AFTER)
    .action(async (flags: ConsoleFlags) => {
      const creds = consoleCredentials(flags, ctx.env);
      const hasCreds = creds.token !== undefined || creds.basic !== undefined;
      if (!isLoopbackAddress(flags.host) && !hasCreds)
        throw new ConfigError(
          '--host',
          `--host ${flags.host} lets other hosts in: give a token (--token-file or FERRY_CONSOLE_TOKEN) or credentials (--basic-auth-file or FERRY_CONSOLE_BASIC_AUTH), or keep --host 127.0.0.1`,
        );
      const opened = await openConsole(flags, ctx, 'ferry console');
      try {
        const server = await startConsole({
          ...opened.options,
          host: flags.host,
          port: flags.port,
          readOnly: Boolean(flags.readOnly),
          ...creds,
          ...(flags.operator !== undefined ? { operator: flags.operator } : {}),
        });
        ctx.out(
          `ferry console on ${server.url}${flags.readOnly ? ' (read-only)' : hasCreds ? '' : ' (actions off: no token or credentials)'}; Ctrl-C stops it`,
        );
        await new Promise<void>((resolve) => {
          const stop = () => {
            process.off('SIGINT', stop);
            process.off('SIGTERM', stop);
            resolve();
          };
          process.on('SIGINT', stop);
          process.on('SIGTERM', stop);
        });
        await server.close();
      } finally {
        await opened.close();
      }
    });
}
