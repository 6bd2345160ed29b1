import { type Command, Option } from 'commander';
import { RELAY_DEFAULTS, RELAY_LIMITS } from '../relay-options.js';
import { CLI_DEFAULTS } from './defaults.js';
import { parseDatabaseUrl, parseIntIn, parseNatsUrls, parseSchema } from './flag-parsers.js';

// The flags several commands share, each declared once here with its variable, default and range.

/** Why a credential belongs in a variable or a file: the help of every flag that can carry one says it. */
const ARGV_VISIBLE = 'argv is visible to every local user in ps';

/** `--database-url`, from FERRY_DATABASE_URL, then DATABASE_URL. */
export function databaseUrlOption(): Option {
  return new Option(
    '--database-url <url>',
    `PostgreSQL connection URL (env FERRY_DATABASE_URL, then DATABASE_URL); with a password in it, prefer the variable: ${ARGV_VISIBLE}`,
  ).argParser(parseDatabaseUrl);
}

/** `--schema`, from FERRY_SCHEMA, default `ferry`. */
export function schemaOption(): Option {
  return new Option('--schema <name>', 'schema of the Ferry tables')
    .env('FERRY_SCHEMA')
    .default(CLI_DEFAULTS.schema)
    .argParser(parseSchema);
}

/** `--boss-schema` of the inbox commands: the inbox's pg-boss schema, where its parked events are. */
export function inboxBossSchemaOption(): Option {
  return new Option('--boss-schema <name>', 'schema of the inbox pg-boss (its bossSchema option; default <schema>_boss)')
    .env('FERRY_BOSS_SCHEMA')
    .argParser(parseSchema);
}

/** What `addDatabaseOptions` parses: the flags the operator commands (status, replay, doctor, verify) share. */
export interface DatabaseFlags {
  databaseUrl?: string;
  schema: string;
  json?: boolean;
}

/** `--database-url`, `--schema` and `--json`. */
export function addDatabaseOptions(cmd: Command): Command {
  return cmd.addOption(databaseUrlOption()).addOption(schemaOption()).addOption(new Option('--json', 'print the result as JSON'));
}

/** What `addNatsOptions` parses. */
export interface NatsFlags {
  natsUrl: string[];
  natsUser?: string;
  natsPassword?: string;
  natsToken?: string;
  natsNkeySeed?: string;
  natsCreds?: string;
  natsTlsCa?: string;
  natsTlsCert?: string;
  natsTlsKey?: string;
}

/** The NATS connection flags (URLs, credentials, TLS) of every command that talks to NATS, with their FERRY_* variables. */
export function addNatsOptions(cmd: Command): Command {
  return cmd
    .addOption(
      new Option(
        '--nats-url <urls>',
        `NATS server URLs, comma-separated; user:password@ or token@ in them is used (the same in each), but prefer FERRY_NATS_URL then: ${ARGV_VISIBLE}`,
      )
        .env('FERRY_NATS_URL')
        .default([CLI_DEFAULTS.natsUrl], CLI_DEFAULTS.natsUrl)
        .argParser(parseNatsUrls),
    )
    .addOption(new Option('--nats-user <user>', 'NATS user (with --nats-password)').env('FERRY_NATS_USER'))
    .addOption(
      new Option('--nats-password <password>', `NATS password; prefer FERRY_NATS_PASSWORD: ${ARGV_VISIBLE}`).env('FERRY_NATS_PASSWORD'),
    )
    .addOption(new Option('--nats-token <token>', `NATS token; prefer FERRY_NATS_TOKEN: ${ARGV_VISIBLE}`).env('FERRY_NATS_TOKEN'))
    .addOption(
      new Option('--nats-nkey-seed <seed>', `NATS user nkey seed (SU…); prefer FERRY_NATS_NKEY_SEED: ${ARGV_VISIBLE}`).env(
        'FERRY_NATS_NKEY_SEED',
      ),
    )
    .addOption(
      new Option('--nats-creds <file>', 'NATS credentials file (user JWT + seed, as nsc writes it); checked at start').env(
        'FERRY_NATS_CREDS',
      ),
    )
    .addOption(new Option('--nats-tls-ca <file>', 'CA certificate file to verify the NATS server').env('FERRY_NATS_TLS_CA'))
    .addOption(new Option('--nats-tls-cert <file>', 'client certificate file for NATS mutual TLS').env('FERRY_NATS_TLS_CERT'))
    .addOption(new Option('--nats-tls-key <file>', 'client key file for NATS mutual TLS').env('FERRY_NATS_TLS_KEY'));
}

/**
 * The relay's integer options with a flag, and each flag's help: the flag's range comes from
 * `RELAY_LIMITS`, its default from `RELAY_DEFAULTS`, its variable from its name (`--batch-size`:
 * `FERRY_BATCH_SIZE`). `ferry relay`, `ferry doctor` and `ferry console` take them from here.
 */
const RELAY_INT_FLAGS = {
  // The retry span's (addRetrySpanOptions).
  pollIntervalMs: ['--poll-interval-ms <ms>', 'longest wait between polls when idle; also the lane lease check interval (10-60000)'],
  maxAttempts: [
    '--max-attempts <n>',
    'failed attempts after which a row is dead (1-1000); a failure while JetStream itself is down never kills',
  ],
  backoffBaseMs: ['--backoff-base-ms <ms>', 'retry delay cap of the first retry; doubles per attempt, full jitter'],
  backoffMaxMs: ['--backoff-max-ms <ms>', 'largest retry delay cap'],
  publishTimeoutMs: ['--publish-timeout-ms <ms>', 'how long to wait for one PubAck'],
  // The daemon's own.
  batchSize: ['--batch-size <n>', 'keys claimed per batch, each with its rows in a chain (1-10000)'],
  maxInFlight: ['--max-in-flight <n>', 'claimed, not yet acknowledged rows at most, shared among the keys of a claim (1-100000)'],
  breakerCooldownMs: ['--breaker-cooldown-ms <ms>', 'how long the NATS circuit stays open before a probe'],
  leaseTermMs: [
    '--lease-term-ms <ms>',
    'lane lease term: an instance that does not renew within it (frozen, cut off, stuck) loses its lanes to a live one (500-600000)',
  ],
  pgConnectTimeoutMs: ['--pg-connect-timeout-ms <ms>', 'bound on opening a PostgreSQL connection'],
  pgStatementTimeoutMs: [
    '--pg-statement-timeout-ms <ms>',
    "server-side statement_timeout of the relay's statements (the client gives up 1 s later)",
  ],
  pgKeepaliveMs: [
    '--pg-keepalive-ms <ms>',
    'TCP keepalive idle time of PostgreSQL connections, both sides; the server drops a peer silent for 3 x this',
  ],
  natsPingIntervalMs: ['--nats-ping-interval-ms <ms>', 'NATS client ping interval'],
  natsMaxPingOut: ['--nats-max-ping-out <n>', 'unanswered NATS pings after which the client reconnects'],
} as const satisfies Partial<Record<keyof typeof RELAY_LIMITS, readonly [string, string]>>;

/** The integer flag of a relay option (see `RELAY_INT_FLAGS`). */
export function relayIntOption(name: keyof typeof RELAY_INT_FLAGS): Option {
  const [flags, description] = RELAY_INT_FLAGS[name];
  const [min, max] = RELAY_LIMITS[name];
  const env = `FERRY_${flags.slice(2, flags.indexOf(' ')).replaceAll('-', '_').toUpperCase()}`;
  return new Option(flags, description).env(env).default(RELAY_DEFAULTS[name]).argParser(parseIntIn(min, max));
}

/** What `addRetrySpanOptions` parses: the relay options its retry span (`retrySpanMs`) is made of. */
export interface RetrySpanFlags {
  pollIntervalMs: number;
  maxAttempts: number;
  backoffBaseMs: number;
  backoffMaxMs: number;
  publishTimeoutMs: number;
}

/**
 * The relay's poll, attempt and backoff flags: `ferry relay` runs by them and
 * `ferry doctor` computes the same retry span from them (the same FERRY_*
 * variables, so a doctor run beside the relays reads their values).
 */
export function addRetrySpanOptions(cmd: Command): Command {
  const names: readonly (keyof RetrySpanFlags)[] = ['pollIntervalMs', 'maxAttempts', 'backoffBaseMs', 'backoffMaxMs', 'publishTimeoutMs'];
  for (const name of names) cmd.addOption(relayIntOption(name));
  return cmd;
}
