import type { Logger } from '@ferry/core';
import type { ConnectionOptions } from '@nats-io/transport-node';

/** The logger every Ferry part accepts (core's): pino fits as is; the relay binds its components with `child` when there is one. */
export type { Logger } from '@ferry/core';

/** A stream `--ensure-stream NAME=SUBJECT[,SUBJECT]` creates when missing, or adds the subjects it lacks to. */
export interface EnsureStream {
  readonly name: string;
  readonly subjects: readonly string[];
}

/**
 * What `createRelay()` accepts. Every field but `databaseUrl` is optional;
 * `compileRelayOptions()` applies the defaults listed in `RELAY_DEFAULTS`.
 *
 * @example
 * const relay = createRelay({ databaseUrl: 'postgres://app@db/app', nats: { servers: 'nats://nats:4222' } });
 * await relay.start();
 * // … on SIGTERM:
 * await relay.stop();
 */
export interface RelayOptions {
  /** PostgreSQL URL of the producer database. The relay opens its own connections. */
  databaseUrl: string;
  /** Passed to `connect()` of `@nats-io/transport-node` (servers, auth, TLS). */
  nats?: ConnectionOptions;
  /** Schema of the Ferry tables. Default `ferry`. */
  schema?: string;
  /** Lanes this instance leases at most; default automatic (a fair share of the live instances). */
  lanesPerInstance?: number | 'auto';
  /** Keys claimed per batch (each key's rows go out as a chain). Default 500. */
  batchSize?: number;
  /** Claimed, not yet acknowledged rows at most, shared among the keys a claim finds. Default 5000. */
  maxInFlight?: number;
  /** Longest sleep between polls when idle, and the lane lease check interval. Default 500. */
  pollIntervalMs?: number;
  /** LISTEN on the publisher's NOTIFY channel as a wake-up hint. Default true. */
  listen?: boolean;
  /** Failed attempts after which a row is dead; a failure while JetStream itself is down never kills. Default 25. */
  maxAttempts?: number;
  /** First retry delay cap (full jitter). Default 500. */
  backoffBaseMs?: number;
  /** Retry delay cap. Default 60000. */
  backoffMaxMs?: number;
  /** How long to wait for one PubAck. Default 10000. */
  publishTimeoutMs?: number;
  /**
   * The outbox's retention is stored with it (`ferry migrate --retention`,
   * default 7 days) and is what the prune job uses, whichever instance runs
   * it. Given here, it must equal the stored one or `start()` fails with a
   * `ConfigError`: one retention per outbox. Default: the stored one.
   */
  retentionMs?: number;
  /** Cron expression of the prune job (pg-boss). Default every 10 minutes. */
  pruneCron?: string;
  /** Rows deleted per prune statement. Default 5000. */
  pruneBatchSize?: number;
  /** Run the pg-boss maintenance (prune) at all. Default true. */
  maintenance?: boolean;
  /** Consecutive NATS failures that open the circuit. Default 5. */
  breakerThreshold?: number;
  /** How long the circuit stays open before a probe. Default 5000. */
  breakerCooldownMs?: number;
  /** Streams to create when missing, or to add the subjects they lack to (none removed), at start. */
  ensureStreams?: readonly EnsureStream[];
  /** PostgreSQL `application_name` prefix; the instance id is appended. Default `ferry-relay`. */
  applicationName?: string;
  /** pino-compatible logger; default silent. */
  logger?: Logger;
  /** pg-boss polling intervals in seconds (tests shorten them). Default 30. */
  cronMonitorIntervalSeconds?: number;
  /**
   * The lane lease term: an instance that has not renewed its leases for this
   * long (frozen, cut off from PostgreSQL or NATS, stuck in a statement)
   * loses them, and another instance takes them on its next poll. The holder
   * itself stops a quarter of the term earlier, by its own monotonic clock.
   * Default 10000.
   */
  leaseTermMs?: number;
  /** Bound on opening a PostgreSQL connection. Default 5000. */
  pgConnectTimeoutMs?: number;
  /** Server-side `statement_timeout` of the relay's statements (the client gives up 1 s later). Default 30000. */
  pgStatementTimeoutMs?: number;
  /** TCP keepalive idle time of PostgreSQL connections, both sides; the server also drops a peer that acknowledges nothing for 3 x this. Default 10000. */
  pgKeepaliveMs?: number;
  /** NATS client ping interval (a `nats.pingInterval` given wins). Default 5000. */
  natsPingIntervalMs?: number;
  /** Unanswered NATS pings after which the client reconnects (a `nats.maxPingOut` given wins). Default 3. */
  natsMaxPingOut?: number;
}

export type CompiledRelayOptions = Readonly<
  Required<Omit<RelayOptions, 'logger' | 'nats' | 'lanesPerInstance' | 'ensureStreams' | 'retentionMs'>> & {
    /** Undefined: the outbox's stored retention, unchecked. */
    retentionMs: number | undefined;
    nats: ConnectionOptions;
    lanesPerInstance: number | 'auto';
    ensureStreams: readonly EnsureStream[];
    logger: Logger;
  }
>;

export const RELAY_STATES = ['idle', 'starting', 'running', 'draining', 'stopped', 'failed'] as const;
export type RelayState = (typeof RELAY_STATES)[number];

/** Why a publish failed, as counted in `ferry_publish_failures_total{reason}`. */
export const FAILURE_REASONS = [
  'timeout',
  'no_responders',
  'connection',
  'max_payload',
  'permission',
  'reserved_subject',
  'rejected',
  'other',
] as const;
export type FailureReason = (typeof FAILURE_REASONS)[number];

/** Events the relay emits (for tests, metrics and logs): `relay.on(name, listener)`. */
export interface RelayEvents {
  'relay:batch:published': { rows: number; published: number; failed: number; durationMs: number };
  'relay:row:dead': { id: string; key: string; seq: string; reason: FailureReason; error: string };
  'relay:circuit': { state: 'closed' | 'open' | 'half-open' };
  'relay:prune': { deleted: number; instance: string; jobId: string };
}

export interface Relay {
  /** A unique id of this instance, also in its PostgreSQL `application_name`. */
  readonly instanceId: string;
  readonly state: RelayState;
  /** Lanes this instance holds right now. */
  readonly lanes: readonly number[];
  /** Prometheus text of this instance's metrics. */
  metrics(): Promise<string>;
  /** Content type of `metrics()`. */
  readonly metricsContentType: string;
  /** PostgreSQL and NATS connected and at least one lane leased (or none free). */
  ready(): boolean;
  on<K extends keyof RelayEvents>(event: K, listener: (e: RelayEvents[K]) => void): void;
  /** Connects and starts relaying. Idempotent. */
  start(): Promise<void>;
  /** Stops claiming, awaits in-flight PubAcks, marks them, drains NATS, closes PostgreSQL. Idempotent. */
  stop(): Promise<void>;
  /** Runs one prune pass now (what the cron job runs); returns rows deleted. */
  prune(): Promise<number>;
}
