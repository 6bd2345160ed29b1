import type { AnyContract, ContractEventMap, ContractRegistry } from '@ferry/contracts';
import type { ConnectionPool, EventMap, FerryEvent, Logger, Queryable } from '@ferry/core';

export type { AnyContract };

import type { NatsConnection } from '@nats-io/transport-node';
import type { PgBoss, SendOptions } from 'pg-boss';
import type { Registry } from 'prom-client';

/** Event type → payload shape, e.g. `{ OrderPlaced: { id: string; total: number } }` (core's `EventMap`). */
export type { EventMap };

/** How the gate decides whether an event is applied. */
export const INBOX_MODES = ['latest', 'sequential', 'dedupe'] as const;
export type InboxMode = (typeof INBOX_MODES)[number];

/**
 * A decoded Ferry event handed to a handler. `payload` is `data` parsed as
 * JSON when the content type is JSON (`application/json` or `…+json`), and the
 * raw bytes otherwise.
 */
export interface InboxEvent<T extends string = string, P = unknown> extends FerryEvent {
  readonly type: T;
  readonly payload: P;
  /**
   * With `contracts`: the version the payload was brought to (the type's newest, which the
   * handler takes) and the version the event was published at (older ones were upcast).
   * Absent without contracts.
   */
  readonly contract?: { readonly version: number; readonly publishedVersion: number };
}

/** pg-boss bound to the handler's transaction: a job sent here exists iff the handler commits. */
export interface TxBoss {
  send(name: string, data?: object | null, options?: Omit<SendOptions, 'db'>): Promise<string | null>;
}

/** What a handler gets besides the event. */
export interface HandlerContext {
  /** The message's transaction. Write the effect through it; never COMMIT or ROLLBACK it. */
  readonly tx: Queryable;
  /** pg-boss bound to `tx`. The queue must exist (`boss.createQueue`). */
  readonly boss: TxBoss;
  /** The consumer name. */
  readonly consumer: string;
  /** 1 for the first delivery; counts JetStream deliveries and park retries. */
  readonly attempt: number;
}

export type Handler<T extends string = string, P = unknown> = (event: InboxEvent<T, P>, ctx: HandlerContext) => Promise<void>;

/**
 * One typed handler per event type of the map; types without a handler are
 * parked as `unknown-type`. Without a map (the default `EventMap`) any type
 * name is accepted and every payload is `unknown`.
 */
export type Handlers<E extends EventMap> = string extends keyof E
  ? Record<string, Handler<string, unknown>>
  : { [T in keyof E & string]?: Handler<T, E[T]> };

/** Why an event was parked. */
export const PARK_REASONS = [
  'handler-failed',
  'undecodable-headers',
  'undecodable-body',
  'unknown-type',
  'gap-timeout',
  'behind-parked',
  'invalid-data',
  'unknown-version',
  'upcast-failed',
] as const;
export type ParkReason = (typeof PARK_REASONS)[number];

/** What happened to one message; reported through `onEvent`. */
export type InboxReport =
  | { kind: 'applied'; consumer: string; id: string; key: string; version: bigint; type: string; durationMs: number; fromPark: boolean }
  | { kind: 'stale'; consumer: string; id: string; key: string; version: bigint; recorded: bigint }
  | { kind: 'duplicate'; consumer: string; id: string; key: string; version: bigint }
  | { kind: 'gap'; consumer: string; id: string; key: string; version: bigint; recorded: bigint; waitedMs: number }
  | { kind: 'failed'; consumer: string; id: string; key: string; version: bigint; attempt: number; error: unknown; willRetry: boolean }
  | {
      kind: 'parked';
      consumer: string;
      id: string | undefined;
      key: string | undefined;
      reason: ParkReason;
      error: string;
      jobId: string | null;
    };
export type InboxReportKind = InboxReport['kind'];

/** Pino-compatible logger (core's `Logger`, the subset Ferry calls). */
export type { Logger };

/**
 * What `createInbox()` accepts. `pool`, `nc`, `stream`, `consumer` and
 * `handlers` are required; every other option has the default named on it
 * (all of them in `INBOX_DEFAULTS`). Invalid options throw a
 * `ValidationError` naming the option and its accepted range.
 *
 * @example
 * const inbox = createInbox<OrderEvents>({
 *   pool, nc, stream: 'ORDERS', consumer: 'billing',
 *   mode: 'latest',   // default
 *   concurrency: 32,  // default
 *   handlers: {
 *     OrderPlaced: async (event, { tx }) => {
 *       await tx.query('INSERT INTO invoices (order_id) VALUES ($1)', [event.payload.id]);
 *     },
 *   },
 * });
 */
export interface InboxOptions<E extends EventMap = EventMap> {
  /** The consumer's database (with the inbox migrations applied to `schema`). */
  pool: ConnectionPool;
  /** A connection from `@nats-io/transport-node`'s `connect()`; the inbox does not close it. */
  nc: NatsConnection;
  /** JetStream stream name. */
  stream: string;
  /** Durable consumer name; also the `consumer` column of the inbox tables. */
  consumer: string;
  /** Subjects to consume. nats-server 2.9 takes exactly one filter subject per consumer. Default: the whole stream. */
  filterSubjects?: readonly string[];
  /** Default `latest`. */
  mode?: InboxMode;
  /** Handlers running at once in this process (1-1024). Default 32. */
  concurrency?: number;
  /** Handler attempts before the event is parked (1-100). Default 5. */
  maxDeliver?: number;
  /** The consumer's `max_ack_pending`, shared by all instances on it. Default 2 × concurrency. */
  maxAckPending?: number;
  /**
   * JetStream ack wait: how long after the last sign of life JetStream redelivers a message. The
   * inbox tells the server every half of it that a message is in progress, for at most
   * `maxTransactionMs`; a frozen or crashed instance's messages come back after this. Default 30 000.
   */
  ackWaitMs?: number;
  /**
   * Life of each JetStream pull request (1 000-60 000). Heartbeats come every half of it, so a
   * consumer whose server died pulls again within about this long; `stop()` lets the open request
   * end rather than cut it (a cut request strands the messages the server was sending for
   * `ackWaitMs`), so it waits at most this long and a second. Default 10 000.
   */
  pullExpiresMs?: number;
  /**
   * Server-side `idle_in_transaction_session_timeout` of each message's transaction: PostgreSQL ends
   * the session of an instance that stops inside a transaction (frozen, cut off) after this long,
   * which releases its key's row lock; its commit then fails, so nothing is applied twice. A handler
   * may not wait this long between two statements. A frozen instance's keys wait at most
   * `ackWaitMs` + this (JetStream redelivers after the ack wait). Default 30 000.
   */
  transactionIdleTimeoutMs?: number;
  /** Server-side `lock_timeout` of each message's transaction (a key row lock wait). Default 30 000. */
  lockTimeoutMs?: number;
  /**
   * Client-side bound on each of the inbox's own transactions, by the inbox's clock, from taking a
   * connection to the answer to COMMIT (the gate, the handler, the parking lot's writes). Past it the
   * connection is released with an error (a `pg.Pool` destroys it, never reuses it), the inbox stops
   * extending the message and naks it with the next backoff, so another instance gets it: an instance
   * cut off from PostgreSQL (NATS still up) holds a key at most this long plus the backoff, whatever
   * pool it was given. Must be greater than `lockTimeoutMs`; a handler that needs longer needs a larger
   * value. Default `lockTimeoutMs` + `transactionIdleTimeoutMs` (60 000).
   *
   * @example
   * createInbox({ …, lockTimeoutMs: 5_000, maxTransactionMs: 20_000 }); // handlers get at least 15 s
   */
  maxTransactionMs?: number;
  /** Nak delays after the 1st, 2nd, … failure (the last repeats). Default [1 000, 5 000, 30 000]. */
  backoffMs?: readonly number[];
  /**
   * `sequential`: how long an early version may wait (stored in `inbox_early`, its message acked) for its
   * gap to fill before the key's stored versions are parked; 0 parks at once. Default 60 000.
   */
  gapTimeoutMs?: number;
  /** `sequential`: nak delay when an early version's predecessor committed while it was being stored. Default 100. */
  gapRetryMs?: number;
  /** `dedupe`: how long applied message ids are kept. Default 7 days. */
  dedupeRetentionMs?: number;
  /** A handler per event type, run in the message's transaction; an event of a type without one is parked (`unknown-type`). */
  handlers: Handlers<E>;
  /** PostgreSQL schema holding `inbox_versions` / `inbox_messages`. Default `ferry`. */
  schema?: string;
  /** Create or update the durable consumer on start (default), or only verify it (`false`). */
  manageConsumer?: boolean;
  /** A started pg-boss of the caller's; by default the inbox runs its own on `pool`. */
  boss?: PgBoss;
  /** Schema of the inbox's own pg-boss. Default `<schema>_boss` (`ferry_boss`), as for every part; earlier versions used `pgboss`. With `boss` in `sequential` mode: the schema that pg-boss was constructed with (the parking lot is kept in version order there). */
  bossSchema?: string;
  /**
   * Where to look at start for parked events of this consumer left by an earlier release: a warning
   * names them and what to do. Default `pgboss` (the parking lot before `<schema>_boss`); `false`: do not look.
   */
  oldBossSchema?: string | false;
  /** How often the park worker polls, in ms (≥ 500). Default 2 000. */
  parkPollIntervalMs?: number;
  /** Park worker retries of a parked event before it stays failed (and holds its key), at the least: `retrySpanMs` may add more. Default 3. */
  parkRetryLimit?: number;
  /** First park retry delay in ms, doubling from there; no wait is longer than a minute or this, whichever is longer. Default 1 000. */
  parkRetryDelayMs?: number;
  /**
   * How long the parking lot keeps retrying an event whose handler fails (0-86 400 000 ms) before the
   * event is `failed` for good and holds its key until an operator retries or discards it. The
   * retries back off from `parkRetryDelayMs`, doubling up to one a minute, and there are never fewer
   * than `parkRetryLimit`. Measured from the event's first try in the parking lot (the stream's
   * `maxDeliver` tries come before it). The default, 15 minutes, rides out a dependency's restart or failover (a
   * database, a broker, a rolling deploy of a downstream service) so a transient outage fails no key;
   * a handler that is truly broken still shows as `failed` within it. 0: `parkRetryLimit` alone
   * decides. Default 900 000.
   *
   * @example
   * createInbox({ …, retrySpanMs: 60 * 60_000 }); // a dependency that may be down for up to an hour
   */
  retrySpanMs?: number;
  /**
   * Where the inbox logs (pino-compatible, e.g. `pino().child({ component: 'inbox' })`). Default
   * `WARN_LOGGER`: warnings and errors (a failing handler, a parked event, a consumer that stopped)
   * as one line each on stderr, nothing else. `SILENT_LOGGER` mutes it.
   */
  logger?: Logger;
  /** Called with every outcome (`applied`, `stale`, `duplicate`, `gap`, `failed`, `parked`); an exception it throws is logged, never fails the message. Default: none. */
  onEvent?: (report: InboxReport) => void;
  /**
   * A prom-client registry to export the inbox's metrics in (`ferry_inbox_*`,
   * labelled by `consumer`; several inboxes may share one registry). Default:
   * no metrics.
   *
   * @example
   * import { Registry } from 'prom-client';
   * const registry = new Registry();
   * createInbox({ ..., metrics: registry }); // serve registry.metrics() on /metrics
   */
  metrics?: Registry;
  /** How often the consumer's pending/ack-pending counts are read from JetStream for the metrics, in ms. Default 5 000. */
  lagSampleIntervalMs?: number;
  /**
   * How often the inbox renews its row in `inbox_instances` (inbox migration 000008), in ms: `ferry
   * status` and the console list each running inbox with its consumer, release and last heartbeat,
   * and show it stale once three intervals pass without one. From 1 000 to 600 000; default 10 000.
   */
  heartbeatIntervalMs?: number;
  /**
   * The event contracts (`defineContracts()` of `@ferry/contracts`). Each event is then checked
   * against the contract it was published under (its `ce-dataschema`, else `ce-dataversion`, else
   * v1) and upcast step by step to its type's newest version before its handler runs; one that fails
   * is parked, never handed over: `invalid-data` (with the validator's issues), `unknown-version`
   * (newer than this consumer knows), `upcast-failed`. Every handler's type must have a contract.
   * Default none: payloads are handed over as decoded, at no cost. See docs/contracts.md.
   */
  contracts?: ContractRegistry;
}

/** `createInbox({ contracts, handlers })`: the handlers are typed by the registry, each payload its type's newest version. */
export type ContractInboxOptions<C extends AnyContract> = Omit<InboxOptions<ContractEventMap<ContractRegistry<C>>>, 'contracts'> & {
  contracts: ContractRegistry<C>;
};

export type InboxState = 'idle' | 'starting' | 'running' | 'draining' | 'stopped' | 'failed';

export interface InboxCounts {
  applied: number;
  stale: number;
  duplicate: number;
  gap: number;
  failed: number;
  parked: number;
}

/**
 * A running inbox.
 *
 * @example
 * const inbox = createInbox<OrderEvents>({ pool, nc, stream: 'ORDERS', consumer: 'billing', handlers: {
 *   OrderPlaced: async (e, { tx }) => { await tx.query('INSERT INTO invoices(order_id) VALUES ($1)', [e.payload.id]); },
 * } });
 * await inbox.start();
 */
export interface Inbox {
  readonly consumer: string;
  readonly state: InboxState;
  /** Creates/verifies the consumer, starts pg-boss and the park worker, starts consuming. Idempotent. */
  start(): Promise<void>;
  /** Stops fetching, finishes in-flight messages, stops the park worker; leaves `pool` and `nc` open. Idempotent. */
  stop(): Promise<void>;
  /** Messages per outcome since start. */
  counts(): Readonly<InboxCounts>;
  /** Messages received and not yet settled. */
  inFlight(): number;
  /** The pg-boss queue holding this consumer's parked events. */
  readonly parkQueue: string;
}
