import { readFileSync } from 'node:fs';
import type { Server } from 'node:http';
import { ConfigError } from '@ferry/core';
import { type Authenticator, type ConnectionOptions, credsAuthenticator, nkeyAuthenticator } from '@nats-io/transport-node';
import { Command, Option } from 'commander';
import {
  addNatsOptions,
  databaseUrlOption,
  LOG_LEVELS,
  type NatsFlags,
  natsUrlPasswords,
  parseBoolean,
  parseDuration,
  parseEnsureStream,
  parseIntIn,
  parseLanesPerInstance,
  redactNatsUrls,
  redactUrl,
  resolveDatabaseUrl,
  schemaOption,
} from '../config.js';
import type { CommandContext } from '../context.js';
import { EXIT } from '../exit-codes.js';
import { startHttpServer } from '../http-server.js';
import { createLogger } from '../logger.js';
import { createRelay } from '../relay.js';
import { RELAY_DEFAULTS } from '../relay-options.js';
import { startTraceExporter, traceExportWanted } from '../trace-exporter.js';
import type { EnsureStream, RelayOptions } from '../types.js';

export interface RelayFlags extends NatsFlags {
  databaseUrl?: string;
  schema: string;
  lanesPerInstance: number | 'auto';
  batchSize: number;
  maxInFlight: number;
  pollIntervalMs: number;
  listen: boolean;
  maxAttempts: number;
  backoffBaseMs: number;
  backoffMaxMs: number;
  publishTimeoutMs: number;
  breakerCooldownMs: number;
  retention?: number;
  pruneCron: string;
  maintenance: boolean;
  httpPort: number;
  logLevel: string;
  ensureStream?: EnsureStream[];
  shutdownTimeoutMs: number;
  otel?: boolean;
}

const d = RELAY_DEFAULTS;

const HELP_AFTER = `
Every option can also be set by its FERRY_* environment variable; a flag wins.
--listen can be turned off with --no-listen or FERRY_LISTEN=false.

Exit codes:
  0  stopped cleanly after SIGTERM/SIGINT: in-flight PubAcks awaited and marked
  1  runtime failure (PostgreSQL unreachable at start, schema not migrated, …)
  2  bad usage: an invalid option or environment value; nothing was started
  4  forced stop: a second signal, or --shutdown-timeout-ms passed while draining
     (rows in flight are sent again on the next start; JetStream drops duplicates)

Examples:
  ferry relay --database-url postgres://relay@db/app --nats-url nats://nats:4222
  FERRY_DATABASE_URL=postgres://relay@db/app ferry relay --ensure-stream ORDERS='orders.>' --http-port 9464`;

export function relayCommand(ctx: CommandContext): Command {
  const int = (min: number, max: number) => parseIntIn(min, max);
  return addNatsOptions(
    new Command('relay')
      .description('run the relay daemon: publish outbox rows to NATS JetStream, at-least-once, in per-key order')
      .addOption(databaseUrlOption())
      .addOption(schemaOption()),
  )
    .addOption(
      new Option('--lanes-per-instance <n>', '"auto" (a fair share of the live instances) or a fixed maximum')
        .env('FERRY_LANES_PER_INSTANCE')
        .default(d.lanesPerInstance)
        .argParser(parseLanesPerInstance),
    )
    .addOption(
      new Option('--batch-size <n>', 'keys claimed per batch, each with its rows in a chain (1-10000)')
        .env('FERRY_BATCH_SIZE')
        .default(d.batchSize)
        .argParser(int(1, 10_000)),
    )
    .addOption(
      new Option('--max-in-flight <n>', 'claimed, not yet acknowledged rows at most, shared among the keys of a claim (1-100000)')
        .env('FERRY_MAX_IN_FLIGHT')
        .default(d.maxInFlight)
        .argParser(int(1, 100_000)),
    )
    .addOption(
      new Option('--poll-interval-ms <ms>', 'longest wait between polls when idle; also the lane lease check interval (10-60000)')
        .env('FERRY_POLL_INTERVAL_MS')
        .default(d.pollIntervalMs)
        .argParser(int(10, 60_000)),
    )
    .addOption(new Option('--listen', 'LISTEN for the publisher NOTIFY as a wake-up hint (env FERRY_LISTEN=true|false)').default(d.listen))
    .addOption(new Option('--no-listen', 'poll only'))
    .addOption(
      new Option('--max-attempts <n>', 'failed attempts after which a row is dead (1-1000)')
        .env('FERRY_MAX_ATTEMPTS')
        .default(d.maxAttempts)
        .argParser(int(1, 1000)),
    )
    .addOption(
      new Option('--backoff-base-ms <ms>', 'retry delay cap of the first retry; doubles per attempt, full jitter')
        .env('FERRY_BACKOFF_BASE_MS')
        .default(d.backoffBaseMs)
        .argParser(int(1, 3_600_000)),
    )
    .addOption(
      new Option('--backoff-max-ms <ms>', 'largest retry delay cap')
        .env('FERRY_BACKOFF_MAX_MS')
        .default(d.backoffMaxMs)
        .argParser(int(1, 86_400_000)),
    )
    .addOption(
      new Option('--publish-timeout-ms <ms>', 'how long to wait for one PubAck')
        .env('FERRY_PUBLISH_TIMEOUT_MS')
        .default(d.publishTimeoutMs)
        .argParser(int(100, 600_000)),
    )
    .addOption(
      new Option('--breaker-cooldown-ms <ms>', 'how long the NATS circuit stays open before a probe')
        .env('FERRY_BREAKER_COOLDOWN_MS')
        .default(d.breakerCooldownMs)
        .argParser(int(10, 600_000)),
    )
    .addOption(
      new Option(
        '--retention <duration>',
        "the outbox's retention (stored with it: ferry migrate --retention, default 7d); given, it must match or the relay does not start",
      )
        .env('FERRY_RETENTION')
        .argParser(parseDuration),
    )
    .addOption(new Option('--prune-cron <cron>', 'when the prune job runs (cron, UTC)').env('FERRY_PRUNE_CRON').default(d.pruneCron))
    .addOption(new Option('--no-maintenance', 'do not run the pg-boss prune job on this instance'))
    .addOption(
      new Option('--http-port <port>', 'port of /metrics, /healthz and /readyz (0: off)')
        .env('FERRY_HTTP_PORT')
        .default(9464)
        .argParser(int(0, 65_535)),
    )
    .addOption(new Option('--log-level <level>', 'log level').env('FERRY_LOG_LEVEL').default('info').choices(LOG_LEVELS))
    .addOption(new Option('--otel', 'export OpenTelemetry traces over OTLP/HTTP (or set OTEL_EXPORTER_OTLP_ENDPOINT)'))
    .addOption(
      new Option('--ensure-stream <NAME=SUBJECTS>', 'create this stream when missing (repeatable), e.g. ORDERS=orders.>')
        .env('FERRY_ENSURE_STREAM')
        .argParser(parseEnsureStream),
    )
    .addOption(
      new Option('--shutdown-timeout-ms <ms>', 'force exit when draining takes longer')
        .env('FERRY_SHUTDOWN_TIMEOUT_MS')
        .default(30_000)
        .argParser(int(100, 3_600_000)),
    )
    .addHelpText('after', HELP_AFTER)
    .action(async (flags: RelayFlags, cmd: Command) => {
      if (cmd.getOptionValueSource('listen') === 'default' && ctx.env.FERRY_LISTEN !== undefined) {
        try {
          flags.listen = parseBoolean(ctx.env.FERRY_LISTEN);
        } catch (err) {
          throw new ConfigError('--listen', `FERRY_LISTEN ${(err as Error).message}`);
        }
      }
      const code = await runRelay(flags, ctx);
      if (code !== EXIT.ok) throw new Error('the relay stopped with a failure (see the log)');
    });
}

function readFile(option: string, path: string | undefined): string | undefined {
  if (path === undefined) return undefined;
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(
      option,
      `${option} ${JSON.stringify(path)} cannot be read (${(err as NodeJS.ErrnoException).code}): give a readable file`,
    );
  }
}

/** Flags → `connect()` options of @nats-io/transport-node. */
export function natsConnectOptions(flags: RelayFlags): ConnectionOptions {
  const options: ConnectionOptions = { servers: flags.natsUrl };
  if (flags.natsPassword !== undefined && flags.natsUser === undefined) {
    throw new ConfigError('--nats-password', '--nats-password needs --nats-user');
  }
  if (flags.natsUser !== undefined) {
    options.user = flags.natsUser;
    if (flags.natsPassword !== undefined) options.pass = flags.natsPassword;
  }
  if (flags.natsToken !== undefined) options.token = flags.natsToken;
  const authenticators: Authenticator[] = [];
  if (flags.natsNkeySeed !== undefined) {
    if (!/^SU[A-Z2-7]{50,}$/.test(flags.natsNkeySeed.trim())) {
      throw new ConfigError('--nats-nkey-seed', '--nats-nkey-seed is not a user nkey seed: it starts with SU (value hidden)');
    }
    authenticators.push(nkeyAuthenticator(new TextEncoder().encode(flags.natsNkeySeed.trim())));
  }
  const creds = readFile('--nats-creds', flags.natsCreds);
  if (creds !== undefined) authenticators.push(credsAuthenticator(new TextEncoder().encode(creds)));
  if (authenticators.length > 0) options.authenticator = authenticators.length === 1 ? authenticators[0] : authenticators;
  if (flags.natsTlsCa || flags.natsTlsCert || flags.natsTlsKey) {
    if (Boolean(flags.natsTlsCert) !== Boolean(flags.natsTlsKey)) {
      throw new ConfigError('--nats-tls-cert', '--nats-tls-cert and --nats-tls-key go together');
    }
    const ca = readFile('--nats-tls-ca', flags.natsTlsCa);
    const cert = readFile('--nats-tls-cert', flags.natsTlsCert);
    const key = readFile('--nats-tls-key', flags.natsTlsKey);
    options.tls = { ...(ca ? { ca } : {}), ...(cert ? { cert } : {}), ...(key ? { key } : {}) };
  }
  return options;
}

function passwordOf(url: string): string | undefined {
  try {
    const p = new URL(url).password;
    return p ? decodeURIComponent(p) : undefined;
  } catch {
    return undefined;
  }
}

async function runRelay(flags: RelayFlags, ctx: CommandContext): Promise<number> {
  const databaseUrl = resolveDatabaseUrl(flags.databaseUrl, ctx.env);
  if (flags.backoffMaxMs < flags.backoffBaseMs) {
    throw new ConfigError(
      '--backoff-max-ms',
      `--backoff-max-ms ${flags.backoffMaxMs} is below --backoff-base-ms ${flags.backoffBaseMs}: give a cap at least as large`,
    );
  }
  const nats = natsConnectOptions(flags);
  const logger = createLogger(flags.logLevel, [
    passwordOf(databaseUrl),
    flags.natsPassword,
    flags.natsToken,
    flags.natsNkeySeed,
    ...natsUrlPasswords(flags.natsUrl),
  ]);
  const options: RelayOptions = {
    databaseUrl,
    nats,
    schema: flags.schema,
    lanesPerInstance: flags.lanesPerInstance,
    batchSize: flags.batchSize,
    maxInFlight: flags.maxInFlight,
    pollIntervalMs: flags.pollIntervalMs,
    listen: flags.listen,
    maxAttempts: flags.maxAttempts,
    backoffBaseMs: flags.backoffBaseMs,
    backoffMaxMs: flags.backoffMaxMs,
    publishTimeoutMs: flags.publishTimeoutMs,
    breakerCooldownMs: flags.breakerCooldownMs,
    retentionMs: flags.retention,
    pruneCron: flags.pruneCron,
    maintenance: flags.maintenance,
    ensureStreams: flags.ensureStream ?? [],
    logger,
  };
  if (ctx.env.FERRY_CRON_MONITOR_INTERVAL_SECONDS) options.cronMonitorIntervalSeconds = Number(ctx.env.FERRY_CRON_MONITOR_INTERVAL_SECONDS);
  const stopTracing = traceExportWanted(flags.otel === true, ctx.env) ? await startTraceExporter(logger) : undefined;
  const relay = createRelay(options);
  // TEST-ONLY fault injection (failure proofs, issue 7): FERRY_TEST_FAULT=exit-after-ack SIGKILLs this process
  // right after JetStream acknowledged a batch and before its rows are marked published. Never set it in production.
  if (ctx.env.FERRY_TEST_FAULT === 'exit-after-ack') {
    relay.on('relay:batch:acked', ({ acked }) => {
      if (acked > 0) process.kill(process.pid, 'SIGKILL');
    });
  }
  logger.info(
    {
      event: 'starting',
      database: redactUrl(databaseUrl),
      nats: redactNatsUrls(flags.natsUrl),
      schema: flags.schema,
      pid: process.pid,
      instance: relay.instanceId,
    },
    'ferry relay starting',
  );

  let stopping: Promise<void> | undefined;
  let forced = false;
  const done = new Promise<number>((resolve) => {
    const force = (why: string) => {
      forced = true;
      logger.error({ event: 'forced-exit', why }, `forced exit: ${why}`);
      resolve(EXIT.forced);
    };
    const onSignal = (signal: NodeJS.Signals) => {
      if (stopping) {
        force(`second signal ${signal}`);
        return;
      }
      logger.info({ event: 'signal', signal }, `${signal}: draining`);
      const timer = setTimeout(() => force(`draining took longer than ${flags.shutdownTimeoutMs} ms`), flags.shutdownTimeoutMs);
      timer.unref();
      stopping = relay.stop().then(
        () => {
          clearTimeout(timer);
          resolve(EXIT.ok);
        },
        (err) => {
          logger.error({ err }, 'stop failed');
          clearTimeout(timer);
          resolve(EXIT.failure);
        },
      );
    };
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
  });

  // Before the try: a port in use is a one-line usage error (ConfigError naming --http-port), not a logged stack trace.
  const server: Server | undefined = flags.httpPort > 0 ? await startHttpServer(relay, flags.httpPort) : undefined;
  try {
    // A signal while the start still waits for NATS abandons the start: that is a clean stop, not a failure.
    await Promise.race([relay.start().catch((err) => (stopping ? undefined : Promise.reject(err))), done]);
  } catch (err) {
    logger.error({ err }, 'relay failed to start');
    await relay.stop().catch(() => {});
    server?.close();
    await stopTracing?.();
    throw err;
  }
  const code = await done;
  server?.close();
  server?.closeAllConnections();
  if (!forced) await stopTracing?.();
  if (forced) {
    // Nothing more is awaited: a forced stop must not hang on a server that does not answer.
    process.exit(code);
  }
  return code;
}
