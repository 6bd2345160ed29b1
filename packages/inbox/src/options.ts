import { type ContractRegistry, isContractRegistry } from '@ferry/contracts';
import {
  bossSchemaFor,
  boundedQueries,
  type ConnectionPool,
  DEFAULT_SCHEMA,
  describeValue,
  isNatsName,
  OLD_BOSS_SCHEMA,
  type Queryable,
  SILENT_LOGGER,
  type TransactionOptions,
  ValidationError,
  validateIdentifier,
} from '@ferry/core';
import type { NatsConnection } from '@nats-io/transport-node';
import type { PgBoss } from 'pg-boss';
import type { Registry } from 'prom-client';
import { type ParkRetryPolicy, parkRetryPolicy } from './park-retry.js';
import { type EventMap, type Handler, INBOX_MODES, type InboxMode, type InboxOptions, type InboxReport, type Logger } from './types.js';
import { WARN_LOGGER } from './warn-logger.js';

/** Every default in one place. */
export const INBOX_DEFAULTS = {
  mode: 'latest',
  concurrency: 32,
  maxDeliver: 5,
  ackWaitMs: 30_000,
  pullExpiresMs: 10_000,
  backoffMs: [1_000, 5_000, 30_000],
  gapTimeoutMs: 60_000,
  gapRetryMs: 100,
  dedupeRetentionMs: 7 * 24 * 3_600_000,
  manageConsumer: true,
  parkPollIntervalMs: 2_000,
  parkRetryLimit: 3,
  parkRetryDelayMs: 1_000,
  // Long enough to ride out a dependency's restart (docs/inbox-modes.md#how-long-a-failing-handler-is-retried).
  retrySpanMs: 15 * 60_000,
  lagSampleIntervalMs: 5_000,
  heartbeatIntervalMs: 10_000,
  transactionIdleTimeoutMs: 30_000,
  lockTimeoutMs: 30_000,
} as const;

export interface CompiledInboxOptions {
  readonly pool: ConnectionPool;
  readonly nc: NatsConnection;
  readonly stream: string;
  readonly consumer: string;
  /** The one filter subject, or `undefined` for the whole stream. */
  readonly filterSubject: string | undefined;
  readonly mode: InboxMode;
  readonly concurrency: number;
  readonly maxDeliver: number;
  readonly maxAckPending: number;
  readonly ackWaitMs: number;
  /** Life of each pull request; stop() waits at most this (and a second) for the open one to end. */
  readonly pullExpiresMs: number;
  /** Server-side `idle_in_transaction_session_timeout` of the inbox's own transactions. */
  readonly transactionIdleTimeoutMs: number;
  /** Server-side `lock_timeout` of the inbox's own transactions. */
  readonly lockTimeoutMs: number;
  /**
   * Client-side bound on each of the inbox's own transactions (connect to COMMIT): past it the
   * connection is destroyed and the message given up (nak'ed), and the inbox stops extending it.
   */
  readonly maxTransactionMs: number;
  readonly backoffMs: readonly number[];
  readonly gapTimeoutMs: number;
  readonly gapRetryMs: number;
  readonly dedupeRetentionMs: number;
  /** The caller's own handlers by event type: a Map, so a type such as `constructor` finds nothing it was not given. */
  readonly handlers: ReadonlyMap<string, Handler<string, unknown>>;
  readonly schema: string;
  readonly manageConsumer: boolean;
  readonly boss: PgBoss | undefined;
  readonly bossSchema: string;
  /** Looked at on start for parked events left there (`undefined`: not looked at). */
  readonly oldBossSchema: string | undefined;
  readonly parkPollIntervalMs: number;
  readonly parkRetryLimit: number;
  readonly parkRetryDelayMs: number;
  /** The parking lot retries a failing event for at least this long before it is `failed` (park-retry.ts). */
  readonly retrySpanMs: number;
  /** pg-boss's retry settings of every parked job, from the three above. */
  readonly parkRetry: ParkRetryPolicy;
  readonly logger: Logger;
  readonly onEvent: (report: InboxReport) => void;
  /** The caller's prom-client registry, or `undefined` for no metrics. */
  readonly metrics: Registry | undefined;
  readonly lagSampleIntervalMs: number;
  /** How often the inbox renews its `inbox_instances` row (heartbeat.ts). */
  readonly heartbeatIntervalMs: number;
  /** The event contracts each payload is checked and upcast by, or `undefined` for none. */
  readonly contracts: ContractRegistry | undefined;
}

/** A logger that drops everything (core's): `createInbox({ …, logger: SILENT_LOGGER })` mutes the default warn lines. */
export { SILENT_LOGGER };

const noop = () => {};

function int(value: unknown, option: string, min: number, max: number, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new ValidationError(option, `${option} must be an integer from ${min} to ${max}, got ${describeValue(value)}`);
  }
  return value;
}

const FILTER_SUBJECT = /^[^\s]+$/;

/** Options → a frozen object with every default applied. Throws `ValidationError` naming the bad option. */
/** A registry that has a contract for every handler's type, or a `ValidationError` naming the one that lacks it. */
function compileContracts(contracts: unknown, handlers: object): ContractRegistry | undefined {
  if (contracts === undefined) return undefined;
  if (!isContractRegistry(contracts)) {
    throw new ValidationError(
      'contracts',
      `contracts must be a registry made by defineContracts([...]) of @ferry/contracts, got ${describeValue(contracts)}`,
    );
  }
  for (const type of Object.keys(handlers)) {
    if (contracts.versions(type).length === 0) {
      throw new ValidationError(
        `handlers.${type}`,
        `handlers.${type}: the contracts have no ${JSON.stringify(type)} (they have ${
          contracts
            .types()
            .map((t) => JSON.stringify(t))
            .join(', ') || 'none'
        }); add its defineEvent() to the registry, or remove the handler`,
      );
    }
  }
  return contracts;
}

export function compileInboxOptions<E extends EventMap>(options: InboxOptions<E>): CompiledInboxOptions {
  if (typeof options !== 'object' || options === null) throw new ValidationError('options', 'createInbox needs an options object');
  const { pool, nc } = options;
  if (typeof pool !== 'object' || pool === null || typeof pool.query !== 'function' || typeof pool.connect !== 'function') {
    throw new ValidationError('pool', 'pool must be a pg.Pool (an object with query() and connect())');
  }
  if (typeof nc !== 'object' || nc === null || typeof nc.request !== 'function') {
    throw new ValidationError('nc', 'nc must be a NatsConnection from @nats-io/transport-node connect()');
  }
  if (!isNatsName(options.stream)) {
    throw new ValidationError(
      'stream',
      `stream must be a JetStream stream name (no spaces, '.', '*' or '>'), got ${describeValue(options.stream)}`,
    );
  }
  const consumer = validateIdentifier(options.consumer, 'consumer');
  const filters = options.filterSubjects ?? [];
  if (!Array.isArray(filters) || filters.some((f) => typeof f !== 'string' || !FILTER_SUBJECT.test(f))) {
    throw new ValidationError('filterSubjects', `filterSubjects must be an array of NATS subjects, got ${describeValue(filters)}`);
  }
  if (filters.length > 1) {
    throw new ValidationError(
      'filterSubjects',
      `filterSubjects has ${filters.length} subjects (${describeValue(filters)}), but a JetStream consumer on nats-server 2.9 takes one filter subject; ` +
        'use one wildcard subject (e.g. "orders.>") or one inbox per subject',
    );
  }
  const mode = options.mode ?? INBOX_DEFAULTS.mode;
  if (!INBOX_MODES.includes(mode)) {
    throw new ValidationError('mode', `mode must be one of ${INBOX_MODES.join(', ')}, got ${describeValue(mode)}`);
  }
  const backoffMs = options.backoffMs ?? [...INBOX_DEFAULTS.backoffMs];
  if (
    !Array.isArray(backoffMs) ||
    backoffMs.length === 0 ||
    backoffMs.some((b) => typeof b !== 'number' || !Number.isInteger(b) || b < 0 || b > 3_600_000)
  ) {
    throw new ValidationError(
      'backoffMs',
      `backoffMs must be a non-empty array of integers from 0 to 3600000, got ${describeValue(backoffMs)}`,
    );
  }
  const handlers = options.handlers;
  if (typeof handlers !== 'object' || handlers === null) {
    throw new ValidationError('handlers', 'handlers must be an object mapping event types to async functions');
  }
  for (const [type, fn] of Object.entries(handlers)) {
    if (typeof fn !== 'function')
      throw new ValidationError(`handlers.${type}`, `handlers.${type} must be a function, got ${describeValue(fn)}`);
  }
  const contracts = compileContracts(options.contracts, handlers);
  if (options.manageConsumer !== undefined && typeof options.manageConsumer !== 'boolean') {
    throw new ValidationError('manageConsumer', `manageConsumer must be a boolean, got ${describeValue(options.manageConsumer)}`);
  }
  if (options.onEvent !== undefined && typeof options.onEvent !== 'function') {
    throw new ValidationError('onEvent', 'onEvent must be a function');
  }
  const metrics = options.metrics;
  if (
    metrics !== undefined &&
    (typeof metrics !== 'object' ||
      metrics === null ||
      typeof metrics.getSingleMetric !== 'function' ||
      typeof metrics.registerMetric !== 'function')
  ) {
    throw new ValidationError(
      'metrics',
      `metrics must be a prom-client Registry (new Registry() or register), got ${describeValue(metrics)}`,
    );
  }
  const logger = options.logger ?? WARN_LOGGER;
  const userOnEvent = options.onEvent;
  const schema = validateIdentifier(options.schema ?? DEFAULT_SCHEMA, 'schema');
  const concurrency = int(options.concurrency, 'concurrency', 1, 1024, INBOX_DEFAULTS.concurrency);
  const transactionIdleTimeoutMs = int(
    options.transactionIdleTimeoutMs,
    'transactionIdleTimeoutMs',
    100,
    3_600_000,
    INBOX_DEFAULTS.transactionIdleTimeoutMs,
  );
  const lockTimeoutMs = int(options.lockTimeoutMs, 'lockTimeoutMs', 100, 3_600_000, INBOX_DEFAULTS.lockTimeoutMs);
  // Not in INBOX_DEFAULTS: it follows the two server-side bounds. The gate may wait lockTimeoutMs for
  // a key another instance holds; after it, a handler gets as long as one silent stretch of its
  // transaction may last on the server.
  const maxTransactionMs = int(options.maxTransactionMs, 'maxTransactionMs', 200, 7_200_000, lockTimeoutMs + transactionIdleTimeoutMs);
  if (maxTransactionMs <= lockTimeoutMs) {
    throw new ValidationError(
      'maxTransactionMs',
      `maxTransactionMs (${maxTransactionMs}) must be greater than lockTimeoutMs (${lockTimeoutMs}): the version gate may wait lockTimeoutMs for a key another instance holds, and the handler runs after it; raise maxTransactionMs or lower lockTimeoutMs`,
    );
  }
  const parkRetryLimit = int(options.parkRetryLimit, 'parkRetryLimit', 0, 100, INBOX_DEFAULTS.parkRetryLimit);
  const parkRetryDelayMs = int(options.parkRetryDelayMs, 'parkRetryDelayMs', 1_000, 3_600_000, INBOX_DEFAULTS.parkRetryDelayMs);
  // At most a day: pg-boss deletes a job still waiting after its retention (14 days), and a key held that long is an incident.
  const retrySpanMs = int(options.retrySpanMs, 'retrySpanMs', 0, 86_400_000, INBOX_DEFAULTS.retrySpanMs);
  return Object.freeze({
    pool,
    nc,
    stream: options.stream,
    consumer,
    filterSubject: filters[0],
    mode,
    concurrency,
    maxAckPending: int(options.maxAckPending, 'maxAckPending', 1, 100_000, concurrency * 2),
    maxDeliver: int(options.maxDeliver, 'maxDeliver', 1, 100, INBOX_DEFAULTS.maxDeliver),
    ackWaitMs: int(options.ackWaitMs, 'ackWaitMs', 1_000, 3_600_000, INBOX_DEFAULTS.ackWaitMs),
    pullExpiresMs: int(options.pullExpiresMs, 'pullExpiresMs', 1_000, 60_000, INBOX_DEFAULTS.pullExpiresMs),
    transactionIdleTimeoutMs,
    lockTimeoutMs,
    maxTransactionMs,
    backoffMs: Object.freeze([...backoffMs]),
    gapTimeoutMs: int(options.gapTimeoutMs, 'gapTimeoutMs', 0, 86_400_000, INBOX_DEFAULTS.gapTimeoutMs),
    gapRetryMs: int(options.gapRetryMs, 'gapRetryMs', 1, 60_000, INBOX_DEFAULTS.gapRetryMs),
    dedupeRetentionMs: int(options.dedupeRetentionMs, 'dedupeRetentionMs', 60_000, 365 * 86_400_000, INBOX_DEFAULTS.dedupeRetentionMs),
    // Own enumerable entries only: inherited members (`toString`, `constructor`, `__proto__`) are never handlers.
    handlers: new Map(Object.entries(handlers as unknown as Record<string, Handler<string, unknown>>)),
    schema,
    manageConsumer: options.manageConsumer ?? INBOX_DEFAULTS.manageConsumer,
    boss: options.boss,
    // Not in INBOX_DEFAULTS: it follows `schema` (core's bossSchemaFor, the rule of every part).
    bossSchema: validateIdentifier(options.bossSchema ?? bossSchemaFor(schema), 'bossSchema'),
    oldBossSchema:
      options.oldBossSchema === false ? undefined : validateIdentifier(options.oldBossSchema ?? OLD_BOSS_SCHEMA, 'oldBossSchema'),
    parkPollIntervalMs: int(options.parkPollIntervalMs, 'parkPollIntervalMs', 500, 600_000, INBOX_DEFAULTS.parkPollIntervalMs),
    parkRetryLimit,
    parkRetryDelayMs,
    retrySpanMs,
    parkRetry: parkRetryPolicy({ parkRetryLimit, parkRetryDelayMs, retrySpanMs }),
    logger,
    onEvent: userOnEvent ? guardOnEvent(userOnEvent, logger) : noop,
    metrics,
    lagSampleIntervalMs: int(options.lagSampleIntervalMs, 'lagSampleIntervalMs', 100, 600_000, INBOX_DEFAULTS.lagSampleIntervalMs),
    heartbeatIntervalMs: int(options.heartbeatIntervalMs, 'heartbeatIntervalMs', 1_000, 600_000, INBOX_DEFAULTS.heartbeatIntervalMs),
    contracts,
  });
}

/**
 * The caller's `onEvent`, made unable to disturb the inbox: a hook that throws
 * (say `JSON.stringify` of a report, whose versions are bigints) or returns a
 * rejected promise is reported once, on the first failure, and ignored after
 * that. The hook runs after the message is settled or right before its nak,
 * so an escaping throw would leave the message unsettled (redelivered after
 * the ack wait, again and again) and a rejected promise would be an unhandled
 * rejection, which ends a Node process.
 */
function guardOnEvent(hook: (report: InboxReport) => unknown, logger: Logger): (report: InboxReport) => void {
  let failures = 0;
  const failed = (err: unknown, kind: InboxReport['kind']) => {
    failures++;
    if (failures > 1) return;
    try {
      logger.error({ err, kind }, 'inbox onEvent hook failed; the inbox goes on, and later failures of the hook are not logged');
    } catch {
      // A logger that throws as well has nothing left to tell.
    }
  };
  return (report) => {
    try {
      const result = hook(report);
      if (typeof (result as PromiseLike<unknown> | undefined)?.then === 'function') {
        Promise.resolve(result).catch((err: unknown) => failed(err, report.kind));
      }
    } catch (err) {
      failed(err, report.kind);
    }
  };
}

/** How every transaction of the inbox's own is bounded on the client (withTransaction's options). */
export function boundedTransaction(o: CompiledInboxOptions, begin?: null): TransactionOptions {
  return { timeoutMs: o.maxTransactionMs, timeoutOption: 'maxTransactionMs', ...(begin === null ? { begin } : {}) };
}

/**
 * The inbox's own statements outside its transactions (the early-version sweep, the dedupe prune, its
 * own pg-boss), each bounded like a transaction: on a caller's plain pg.Pool one lost in a partition
 * otherwise waits forever, even after the heal.
 */
export function ownQueries(o: CompiledInboxOptions): Queryable {
  return boundedQueries(o.pool, o.maxTransactionMs, 'maxTransactionMs');
}

/** The pg-boss queue holding a consumer's parked events. */
export function parkQueueName(consumer: string): string {
  return `ferry.inbox.${validateIdentifier(consumer, 'consumer')}.parked`;
}

/** The pg-boss queue of a consumer's dedupe-pruning cron job. */
export function pruneQueueName(consumer: string): string {
  return `ferry.inbox.${validateIdentifier(consumer, 'consumer')}.prune`;
}
