import { LIMITS } from '@ferry/core';
import { INBOX_DEFAULTS } from '@ferry/inbox';
import { RELAY_DEFAULTS } from '../relay-options.js';

/**
 * Every default of the `ferry` commands' own flags, in one place (the relay's
 * options take theirs from `RELAY_DEFAULTS`, the library's table).
 */
export const CLI_DEFAULTS = Object.freeze({
  schema: RELAY_DEFAULTS.schema,
  natsUrl: 'nats://127.0.0.1:4222',
  /** `ferry relay`: port of /metrics, /healthz and /readyz. */
  httpPort: 9464,
  /**
   * `ferry relay`: address of /metrics, /healthz and /readyz. Loopback: they
   * need no credentials and tell anyone who can reach them the lanes, backlog
   * and errors, so reaching them from elsewhere is a choice (0.0.0.0 in a
   * container, where probes and Prometheus come over the pod network).
   */
  httpHost: '127.0.0.1',
  logLevel: 'info',
  /** `ferry relay`: force exit when draining takes longer. */
  shutdownTimeoutMs: 30_000,
  /** The operator commands' NATS connect timeout and PostgreSQL connection timeout. */
  connectTimeoutMs: 5000,
  replayMaxInFlight: 256,
  replayPublishTimeoutMs: RELAY_DEFAULTS.publishTimeoutMs,
  replayProgress: 'auto' as const,
  dlqListLimit: 100,
  parkedListLimit: 1000,
  /** `ferry status --check`: parked inbox events per consumer tolerated before it exits 1. */
  statusMaxParked: 0,
  /** `ferry status --check`: failed parked events per consumer tolerated (each holds its key for good). */
  statusMaxFailedParked: 0,
  /** `ferry status --check`: keys per consumer tolerated waiting on a version nothing holds. */
  statusMaxWaitingKeys: 0,
  /** `ferry console`: its port (the relay's metrics are on 9464, an inbox's often on 9465). */
  consolePort: 9470,
  /** `ferry console`: statement_timeout of every query it sends, so no page can load the database for long. */
  consoleStatementTimeoutMs: 2000,
  /** `ferry console`: statement_timeout of the overview's exact counts (one reader for every viewer) and of the actions. */
  consoleLongStatementTimeoutMs: 30_000,
  consoleRefreshMs: 5000,
  canarySubject: 'ferry.canary',
  canaryTimeoutMs: 10_000,
  /** `ferry doctor`: the publisher's and the inbox's defaults it checks against. */
  maxPayloadBytes: LIMITS.defaultMaxPayloadBytes,
  inboxMaxDeliver: INBOX_DEFAULTS.maxDeliver,
});
