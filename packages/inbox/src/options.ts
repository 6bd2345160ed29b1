import { bossSchemaFor, type ConnectionPool, DEFAULT_SCHEMA, describeValue, ValidationError, validateIdentifier } from '@ferry/core';
import type { NatsConnection } from '@nats-io/transport-node';
import type { PgBoss } from 'pg-boss';
import { type EventMap, type Handler, INBOX_MODES, type InboxMode, type InboxOptions, type InboxReport, type Logger } from './types.js';
import { WARN_LOGGER } from './warn-logger.js';

/** Every default in one place. */
export const INBOX_DEFAULTS = {
  mode: 'latest',
  concurrency: 32,
  maxDeliver: 5,
  ackWaitMs: 30_000,
  backoffMs: [1_000, 5_000, 30_000],
  gapTimeoutMs: 60_000,
  gapRetryMs: 100,
  dedupeRetentionMs: 7 * 24 * 3_600_000,
  manageConsumer: true,
  parkPollIntervalMs: 2_000,
  parkRetryLimit: 3,
  parkRetryDelayMs: 1_000,
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
  readonly backoffMs: readonly number[];
  readonly gapTimeoutMs: number;
  readonly gapRetryMs: number;
  readonly dedupeRetentionMs: number;
  readonly handlers: Readonly<Record<string, Handler<string, unknown>>>;
  readonly schema: string;
  readonly manageConsumer: boolean;
  readonly boss: PgBoss | undefined;
  readonly bossSchema: string;
  readonly parkPollIntervalMs: number;
  readonly parkRetryLimit: number;
  readonly parkRetryDelayMs: number;
  readonly logger: Logger;
  readonly onEvent: (report: InboxReport) => void;
}

const noop = () => {};
/** A logger that drops everything: `createInbox({ …, logger: SILENT_LOGGER })` mutes the default warn lines. */
export const SILENT_LOGGER: Logger = Object.freeze({ debug: noop, info: noop, warn: noop, error: noop });

function int(value: unknown, option: string, min: number, max: number, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new ValidationError(option, `${option} must be an integer from ${min} to ${max}, got ${describeValue(value)}`);
  }
  return value;
}

// NATS stream and consumer names: no whitespace, `.`, `*`, `>`, path separators.
const NATS_NAME = /^[^\s.*>/\\]{1,255}$/;
const FILTER_SUBJECT = /^[^\s]+$/;

/** Options → a frozen object with every default applied. Throws `ValidationError` naming the bad option. */
export function compileInboxOptions<E extends EventMap>(options: InboxOptions<E>): CompiledInboxOptions {
  if (typeof options !== 'object' || options === null) throw new ValidationError('options', 'createInbox needs an options object');
  const { pool, nc } = options;
  if (typeof pool !== 'object' || pool === null || typeof pool.query !== 'function' || typeof pool.connect !== 'function') {
    throw new ValidationError('pool', 'pool must be a pg.Pool (an object with query() and connect())');
  }
  if (typeof nc !== 'object' || nc === null || typeof nc.request !== 'function') {
    throw new ValidationError('nc', 'nc must be a NatsConnection from @nats-io/transport-node connect()');
  }
  if (typeof options.stream !== 'string' || !NATS_NAME.test(options.stream)) {
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
  if (options.manageConsumer !== undefined && typeof options.manageConsumer !== 'boolean') {
    throw new ValidationError('manageConsumer', `manageConsumer must be a boolean, got ${describeValue(options.manageConsumer)}`);
  }
  if (options.onEvent !== undefined && typeof options.onEvent !== 'function') {
    throw new ValidationError('onEvent', 'onEvent must be a function');
  }
  const logger = options.logger ?? WARN_LOGGER;
  const userOnEvent = options.onEvent;
  const schema = validateIdentifier(options.schema ?? DEFAULT_SCHEMA, 'schema');
  const concurrency = int(options.concurrency, 'concurrency', 1, 1024, INBOX_DEFAULTS.concurrency);
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
    backoffMs: Object.freeze([...backoffMs]),
    gapTimeoutMs: int(options.gapTimeoutMs, 'gapTimeoutMs', 0, 86_400_000, INBOX_DEFAULTS.gapTimeoutMs),
    gapRetryMs: int(options.gapRetryMs, 'gapRetryMs', 1, 60_000, INBOX_DEFAULTS.gapRetryMs),
    dedupeRetentionMs: int(options.dedupeRetentionMs, 'dedupeRetentionMs', 60_000, 365 * 86_400_000, INBOX_DEFAULTS.dedupeRetentionMs),
    handlers: Object.freeze({ ...(handlers as unknown as Record<string, Handler<string, unknown>>) }),
    schema,
    manageConsumer: options.manageConsumer ?? INBOX_DEFAULTS.manageConsumer,
    boss: options.boss,
    // Not in INBOX_DEFAULTS: it follows `schema` (core's bossSchemaFor, the rule of every part).
    bossSchema: validateIdentifier(options.bossSchema ?? bossSchemaFor(schema), 'bossSchema'),
    parkPollIntervalMs: int(options.parkPollIntervalMs, 'parkPollIntervalMs', 500, 600_000, INBOX_DEFAULTS.parkPollIntervalMs),
    parkRetryLimit: int(options.parkRetryLimit, 'parkRetryLimit', 0, 100, INBOX_DEFAULTS.parkRetryLimit),
    parkRetryDelayMs: int(options.parkRetryDelayMs, 'parkRetryDelayMs', 1_000, 3_600_000, INBOX_DEFAULTS.parkRetryDelayMs),
    logger,
    onEvent: (report: InboxReport) => {
      if (!userOnEvent) return;
      try {
        userOnEvent(report);
      } catch (err) {
        logger.warn({ err }, 'inbox onEvent hook threw; ignored');
      }
    },
  });
}

/** The pg-boss queue holding a consumer's parked events. */
export function parkQueueName(consumer: string): string {
  return `ferry.inbox.${validateIdentifier(consumer, 'consumer')}.parked`;
}

/** The pg-boss queue of a consumer's dedupe-pruning cron job. */
export function pruneQueueName(consumer: string): string {
  return `ferry.inbox.${validateIdentifier(consumer, 'consumer')}.prune`;
}
