import { DEFAULT_SCHEMA, describeValue, exponentialCapMs, SILENT_LOGGER, ValidationError, validateIdentifier } from '@ferry/core';
import type { CompiledRelayOptions, RelayOptions } from './types.js';

/** Every default of the relay, in one place. */
export const RELAY_DEFAULTS = Object.freeze({
  schema: DEFAULT_SCHEMA,
  lanesPerInstance: 'auto' as const,
  batchSize: 500,
  maxInFlight: 5000,
  pollIntervalMs: 500,
  listen: true,
  maxAttempts: 25,
  backoffBaseMs: 500,
  backoffMaxMs: 60_000,
  publishTimeoutMs: 10_000,
  retentionMs: 7 * 24 * 3600_000,
  pruneCron: '*/10 * * * *',
  pruneBatchSize: 5000,
  maintenance: true,
  breakerThreshold: 5,
  breakerCooldownMs: 5000,
  applicationName: 'ferry-relay',
  cronMonitorIntervalSeconds: 30,
  leaseTermMs: 5_000,
  pgConnectTimeoutMs: 5000,
  pgStatementTimeoutMs: 30_000,
  pgKeepaliveMs: 10_000,
  natsPingIntervalMs: 5000,
  natsMaxPingOut: 3,
});

const MINUTE_MS = 60_000;
const HOUR_MS = 60 * MINUTE_MS;
const DAY_MS = 24 * HOUR_MS;

/**
 * The accepted range `[min, max]` of every integer option; `ferry relay`'s and
 * `ferry doctor`'s flags take the same ranges from here.
 */
export const RELAY_LIMITS = Object.freeze({
  lanesPerInstance: [1, 1024],
  batchSize: [1, 10_000],
  maxInFlight: [1, 100_000],
  pollIntervalMs: [10, MINUTE_MS],
  maxAttempts: [1, 1000],
  backoffBaseMs: [1, HOUR_MS],
  backoffMaxMs: [1, DAY_MS],
  publishTimeoutMs: [100, 10 * MINUTE_MS],
  retentionMs: [1, 3650 * DAY_MS],
  pruneBatchSize: [1, 100_000],
  breakerThreshold: [1, 1000],
  breakerCooldownMs: [10, 10 * MINUTE_MS],
  cronMonitorIntervalSeconds: [1, 45],
  leaseTermMs: [500, 10 * MINUTE_MS],
  pgConnectTimeoutMs: [100, 10 * MINUTE_MS],
  pgStatementTimeoutMs: [100, HOUR_MS],
  pgKeepaliveMs: [1000, HOUR_MS],
  natsPingIntervalMs: [100, 10 * MINUTE_MS],
  natsMaxPingOut: [1, 100],
} as const satisfies Record<string, readonly [number, number]>);

type Limited = keyof typeof RELAY_LIMITS;

function int(name: Limited, value: unknown): number {
  const [min, max] = RELAY_LIMITS[name];
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min || value > max) {
    throw new ValidationError(name, `${name} must be an integer from ${min} to ${max}, got ${describeValue(value)}`);
  }
  return value;
}

/** The integer options that take their default when not given: every limited one but `lanesPerInstance` ('auto') and `retentionMs` (no default). */
type PlainInt = Exclude<Limited, 'lanesPerInstance' | 'retentionMs'>;
const PLAIN_INTS = (Object.keys(RELAY_LIMITS) as Limited[]).filter((n): n is PlainInt => n !== 'lanesPerInstance' && n !== 'retentionMs');

/** The plain integer options, each the given value or its default, checked against its range. */
function plainInts(options: RelayOptions): Record<PlainInt, number> {
  const out = {} as Record<PlainInt, number>;
  for (const name of PLAIN_INTS) out[name] = int(name, options[name] ?? RELAY_DEFAULTS[name]);
  return out;
}

/** The relay options its retry span is made of. */
export type RetrySpanOptions = Pick<
  CompiledRelayOptions,
  'maxAttempts' | 'backoffBaseMs' | 'backoffMaxMs' | 'publishTimeoutMs' | 'pollIntervalMs'
>;

/**
 * The longest time from a row's first send to its last re-send: the window in
 * which the stream must still recognise a re-send as a duplicate.
 * `--ensure-stream` uses at least this as the stream's duplicate window and
 * `ferry doctor` compares streams with it.
 *
 * Before each of the `maxAttempts - 1` re-sends the relay waits, in the worst
 * case, for the attempt's PubAck until `publishTimeoutMs` (the message may
 * already be stored when the ack is lost: that is the case the window is for),
 * then the attempt's backoff cap, then up to one `pollIntervalMs` until the
 * next claim picks the row up again. Leaving the timeouts out (as before)
 * understated it by up to 24 x 10 s, about 4 minutes, with the defaults.
 */
export function retrySpanMs(options: RetrySpanOptions): number {
  let total = 0;
  for (let attempt = 1; attempt < options.maxAttempts; attempt++) {
    total += options.publishTimeoutMs + exponentialCapMs(attempt, options.backoffBaseMs, options.backoffMaxMs) + options.pollIntervalMs;
  }
  return total;
}

export function compileRelayOptions(options: RelayOptions): CompiledRelayOptions {
  if (typeof options !== 'object' || options === null) {
    throw new ValidationError('options', 'createRelay needs an options object, e.g. { databaseUrl: "postgres://app@db/app" }');
  }
  if (typeof options.databaseUrl !== 'string' || !/^postgres(ql)?:\/\//.test(options.databaseUrl)) {
    throw new ValidationError('databaseUrl', 'databaseUrl must be a PostgreSQL URL such as postgres://user:password@host:5432/database');
  }
  const d = RELAY_DEFAULTS;
  const lanes = options.lanesPerInstance ?? d.lanesPerInstance;
  const compiled: CompiledRelayOptions = {
    databaseUrl: options.databaseUrl,
    nats: options.nats ?? {},
    schema: validateIdentifier(options.schema ?? d.schema, 'schema'),
    lanesPerInstance: lanes === 'auto' ? 'auto' : int('lanesPerInstance', lanes),
    ...plainInts(options),
    listen: options.listen ?? d.listen,
    // The outbox's retention is stored with it (ferry migrate --retention); a value given here
    // must match it (checked at start), and 0 is never a retention.
    retentionMs: options.retentionMs === undefined ? undefined : int('retentionMs', options.retentionMs),
    pruneCron: options.pruneCron ?? d.pruneCron,
    maintenance: options.maintenance ?? d.maintenance,
    ensureStreams: options.ensureStreams ?? [],
    applicationName: options.applicationName ?? d.applicationName,
    logger: options.logger ?? SILENT_LOGGER,
  };
  if (compiled.backoffMaxMs < compiled.backoffBaseMs) {
    throw new ValidationError(
      'backoffMaxMs',
      `backoffMaxMs (${compiled.backoffMaxMs}) must be at least backoffBaseMs (${compiled.backoffBaseMs})`,
    );
  }
  if (typeof compiled.listen !== 'boolean')
    throw new ValidationError('listen', `listen must be true or false, got ${describeValue(compiled.listen)}`);
  return Object.freeze(compiled);
}
