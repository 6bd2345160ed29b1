import type { Server } from 'node:http';
import { ConfigError } from '@ferry/core';
import { Command, Option } from 'commander';
import { resolveDatabaseUrl } from '../cli/database.js';
import { CLI_DEFAULTS } from '../cli/defaults.js';
import { LOG_LEVELS, parseBoolean, parseEnsureStream, parseHost, parseIntIn, parseLanesPerInstance } from '../cli/flag-parsers.js';
import { natsConnectOptions } from '../cli/nats-connection.js';
import {
  addNatsOptions,
  addRetrySpanOptions,
  databaseUrlOption,
  type NatsFlags,
  type RetrySpanFlags,
  relayIntOption,
  schemaOption,
} from '../cli/shared-options.js';
import { type ConsoleHandler, consoleHandler } from '../console/server.js';
import type { CommandContext } from '../context.js';
import { createRelay } from '../daemon/relay.js';
import { parseDuration } from '../duration.js';
import { CommandFailedError } from '../errors.js';
import { EXIT } from '../exit-codes.js';
import { startHttpServer } from '../http-server.js';
import { createLogger } from '../logger.js';
import { isLoopbackAddress } from '../loopback-host.js';
import { redactNatsUrls, redactUrl, urlPasswords } from '../redact.js';
import { RELAY_DEFAULTS } from '../relay-options.js';
import { startTraceExporter, traceExportWanted } from '../trace-exporter.js';
import type { EnsureStream, RelayOptions } from '../types.js';
import { consoleCredentials, type OpenedConsole, openConsole } from './console.js';

export interface RelayFlags extends NatsFlags, RetrySpanFlags {
  databaseUrl?: string;
  schema: string;
  lanesPerInstance: number | 'auto';
  batchSize: number;
  maxInFlight: number;
  listen: boolean;
  breakerCooldownMs: number;
  retention?: number;
  pruneCron: string;
  maintenance: boolean;
  httpPort: number;
  httpHost: string;
  logLevel: string;
  ensureStream?: EnsureStream[];
  shutdownTimeoutMs: number;
  otel?: boolean;
  leaseTermMs: number;
  pgConnectTimeoutMs: number;
  pgStatementTimeoutMs: number;
  pgKeepaliveMs: number;
  natsPingIntervalMs: number;
  natsMaxPingOut: number;
  console?: boolean;
  consoleReadOnly?: boolean;
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
  return addRetrySpanOptions(
    addNatsOptions(
      new Command('relay')
        .description('run the relay daemon: publish outbox rows to NATS JetStream, at-least-once, in per-key order')
        .addOption(databaseUrlOption())
        .addOption(schemaOption()),
    ),
  )
    .addOption(
      new Option('--lanes-per-instance <n>', '"auto" (a fair share of the live instances) or a fixed maximum')
        .env('FERRY_LANES_PER_INSTANCE')
        .default(d.lanesPerInstance)
        .argParser(parseLanesPerInstance),
    )
    .addOption(relayIntOption('batchSize'))
    .addOption(relayIntOption('maxInFlight'))
    .addOption(new Option('--listen', 'LISTEN for the publisher NOTIFY as a wake-up hint (env FERRY_LISTEN=true|false)').default(d.listen))
    .addOption(new Option('--no-listen', 'poll only'))
    .addOption(relayIntOption('breakerCooldownMs'))
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
        .default(CLI_DEFAULTS.httpPort)
        .argParser(parseIntIn(0, 65_535)),
    )
    .addOption(
      new Option(
        '--http-host <address>',
        'address /metrics, /healthz and /readyz listen on: 127.0.0.1 is this host only; 0.0.0.0 (or ::) every interface, e.g. in a container for probes and Prometheus',
      )
        .env('FERRY_HTTP_HOST')
        .default(CLI_DEFAULTS.httpHost)
        .argParser(parseHost),
    )
    .addOption(
      new Option(
        '--console',
        'also serve the operator console (ferry console) on the HTTP port; credentials from FERRY_CONSOLE_TOKEN(_FILE) or FERRY_CONSOLE_BASIC_AUTH(_FILE), needed off 127.0.0.1',
      ).env('FERRY_RELAY_CONSOLE'),
    )
    .addOption(new Option('--console-read-only', 'with --console: offer no actions and accept none').env('FERRY_RELAY_CONSOLE_READ_ONLY'))
    .addOption(new Option('--log-level <level>', 'log level').env('FERRY_LOG_LEVEL').default(CLI_DEFAULTS.logLevel).choices(LOG_LEVELS))
    .addOption(new Option('--otel', 'export OpenTelemetry traces over OTLP/HTTP (or set OTEL_EXPORTER_OTLP_ENDPOINT)'))
    .addOption(
      new Option(
        '--ensure-stream <NAME=SUBJECTS>',
        'create this stream when missing, or add to it the subjects it lacks (none removed); repeatable, e.g. ORDERS=orders.>',
      )
        .env('FERRY_ENSURE_STREAM')
        .argParser(parseEnsureStream),
    )
    .addOption(relayIntOption('leaseTermMs'))
    .addOption(relayIntOption('pgConnectTimeoutMs'))
    .addOption(relayIntOption('pgStatementTimeoutMs'))
    .addOption(relayIntOption('pgKeepaliveMs'))
    .addOption(relayIntOption('natsPingIntervalMs'))
    .addOption(relayIntOption('natsMaxPingOut'))
    .addOption(
      new Option('--shutdown-timeout-ms <ms>', 'force exit when draining takes longer')
        .env('FERRY_SHUTDOWN_TIMEOUT_MS')
        .default(CLI_DEFAULTS.shutdownTimeoutMs)
        .argParser(parseIntIn(100, 3_600_000)),
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
      if (code !== EXIT.ok) throw new CommandFailedError('the relay stopped with a failure (see the log)');
    });
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
    ...urlPasswords([databaseUrl, ...flags.natsUrl]),
    flags.natsPassword,
    flags.natsToken,
    flags.natsNkeySeed,
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
    leaseTermMs: flags.leaseTermMs,
    pgConnectTimeoutMs: flags.pgConnectTimeoutMs,
    pgStatementTimeoutMs: flags.pgStatementTimeoutMs,
    pgKeepaliveMs: flags.pgKeepaliveMs,
    natsPingIntervalMs: flags.natsPingIntervalMs,
    natsMaxPingOut: flags.natsMaxPingOut,
    logger,
  };
  const stopTracing = traceExportWanted(flags.otel === true, ctx.env) ? await startTraceExporter(logger) : undefined;
  const relay = (ctx.createRelay ?? createRelay)(options);
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

  // --console: the operator console on the HTTP port, with the same rules as ferry console's own.
  let console_: OpenedConsole | undefined;
  let consoleHandle: ConsoleHandler | undefined;
  if (flags.console) {
    if (flags.httpPort === 0) throw new ConfigError('--console', '--console serves the console on --http-port: give a port, not 0');
    const creds = consoleCredentials(
      { tokenFile: ctx.env.FERRY_CONSOLE_TOKEN_FILE, basicAuthFile: ctx.env.FERRY_CONSOLE_BASIC_AUTH_FILE },
      ctx.env,
    );
    if (!isLoopbackAddress(flags.httpHost) && creds.token === undefined && creds.basic === undefined)
      throw new ConfigError(
        '--console',
        `--console on --http-host ${flags.httpHost} lets other hosts in: set FERRY_CONSOLE_TOKEN (or _FILE) or FERRY_CONSOLE_BASIC_AUTH (or _FILE), or keep --http-host 127.0.0.1`,
      );
    console_ = await openConsole(
      {
        ...flags,
        statementTimeoutMs: CLI_DEFAULTS.consoleStatementTimeoutMs,
        refreshMs: CLI_DEFAULTS.consoleRefreshMs,
        json: false,
      },
      ctx,
      'ferry relay',
    );
    consoleHandle = consoleHandler({ ...console_.options, host: flags.httpHost, readOnly: Boolean(flags.consoleReadOnly), ...creds });
  }
  // Before the try: a port in use is a one-line usage error (ConfigError naming --http-port), not a logged stack trace.
  const server: Server | undefined =
    flags.httpPort > 0
      ? await startHttpServer(relay, flags.httpPort, flags.httpHost, consoleHandle).catch(async (err) => {
          await console_?.close();
          throw err;
        })
      : undefined;
  if (server) {
    const where = server.address();
    const address =
      typeof where === 'object' && where ? `${where.family === 'IPv6' ? `[${where.address}]` : where.address}:${where.port}` : '';
    logger.info(
      { event: 'http-listening', address },
      `/metrics, /healthz and /readyz${console_ ? ', and the console at /,' : ''} on http://${address} (--http-host, --http-port)`,
    );
  }
  try {
    // A signal while the start still waits for NATS abandons the start: that is a clean stop, not a failure.
    await Promise.race([relay.start().catch((err) => (stopping ? undefined : Promise.reject(err))), done]);
  } catch (err) {
    logger.error({ err }, 'relay failed to start');
    await relay.stop().catch(() => {});
    server?.close();
    await console_?.close();
    await stopTracing?.();
    throw err;
  }
  const code = await done;
  server?.close();
  server?.closeAllConnections();
  if (!forced) await console_?.close();
  if (!forced) await stopTracing?.();
  if (forced) {
    // Nothing more is awaited: a forced stop must not hang on a server that does not answer.
    process.exit(code);
  }
  return code;
}
