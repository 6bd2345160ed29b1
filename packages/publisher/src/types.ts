import type { EventMap, Queryable } from '@ferry/core';

/** Event type → payload shape (core's `EventMap`). `createPublisher<MyEvents>()` makes `publish` check `data` against `type`. */
export type { EventMap };

/** One event to publish. */
export type PublishInput<E extends EventMap = EventMap> = {
  [T in keyof E & string]: {
    /** NATS subject, e.g. `orders.placed`. No wildcards. */
    subject: string;
    /** Partition / aggregate key (1-256 characters). Order is kept per key. */
    key: string;
    /** Event type, e.g. `OrderPlaced`. */
    type: T;
    /**
     * JSON-serialisable payload, or raw bytes together with `contentType`: a
     * Uint8Array/Buffer, any other typed array or DataView (its bytes as laid
     * out in memory), or an ArrayBuffer. A value JSON would silently change
     * (a Map, Set, RegExp, Error, nested bytes, NaN, a function) is refused.
     */
    data: E[T] | Uint8Array | ArrayBuffer | ArrayBufferView;
    /** MIME type; required for bytes, defaults to `application/json`. */
    contentType?: string;
    /** Event id (UUID). Supply it to make the publish idempotent; default a new UUIDv7. */
    id?: string;
    /**
     * Explicit per-key version. Default: the next one, assigned in commit order.
     * It must be above every version the key has had (also pruned ones), and
     * increase along one `publishMany`; otherwise `VersionOrderError`
     * (`FERRY_CONFLICT`) is raised and nothing is written.
     */
    version?: bigint | number;
    /** Extra headers (not `ce-*`, `Nats-*` or `Content-Type`); `traceparent`/`tracestate` pass through. */
    headers?: Record<string, string>;
    /** When it happened, in the years 0001-9999 UTC (what ce-time and PostgreSQL both hold). Default: now. */
    time?: Date;
  };
}[keyof E & string];

export interface PublishResult {
  readonly id: string;
  readonly key: string;
  readonly version: bigint;
  /** Outbox sequence number: the relay's order. */
  readonly seq: bigint;
  /** True when this id was already in the outbox with identical content and nothing was written. */
  readonly existing: boolean;
}

/**
 * What `createPublisher()` accepts. Only `source` is required; every other
 * option has the default named on it.
 *
 * @example
 * const publisher = createPublisher({
 *   source: 'orders-service', // CloudEvents source of every event
 *   schema: 'ferry',          // default: where `ferry migrate` put the outbox
 *   maxPayloadBytes: 1048576, // default: NATS's default max_payload
 * });
 */
export interface PublisherOptions {
  /**
   * Schema of the outbox tables: the one given to `ferry migrate --schema` (or `FERRY_SCHEMA`).
   * Default `ferry`. Libraries never read `FERRY_SCHEMA`: pass the schema here when it is not
   * `ferry`. A schema that is not migrated makes `publish` throw a `MigrationError` naming the fix.
   */
  schema?: string;
  /** CloudEvents `source` of every event, e.g. `orders-service`. Required. */
  source: string;
  /**
   * Largest encoded event (headers + body) accepted, counted in its longest
   * wire form: a `ferry replay` copy, whose `Nats-Msg-Id` is 32 bytes longer
   * than the event id. Default 1 MiB, NATS's default `max_payload`.
   */
  maxPayloadBytes?: number;
  /**
   * Wake a waiting relay at commit with NOTIFY (a latency hint). Default true:
   * the outbox sends the NOTIFY only while a relay has recorded that it waits
   * (its polls found nothing), so publishers of a busy relay pay nothing.
   * `false` never notifies; the relay then finds events at its next poll
   * (up to `--poll-interval-ms` later). See docs/publisher.md, "notify".
   */
  notify?: boolean;
  /**
   * Run the insert as a named prepared statement on node-postgres clients
   * (planned once per connection; about halves publish latency). Default true.
   * Turn off behind a pooler that cannot keep prepared statements (PgBouncer
   * in transaction mode before 1.21).
   */
  preparedStatements?: boolean;
}

/**
 * Writes events into the outbox on the caller's connection, inside the
 * caller's transaction. Never issues BEGIN or COMMIT.
 *
 * @example
 * const publisher = createPublisher({ source: 'orders-service' });
 * await withTransaction(pool, async (tx) => {
 *   await tx.query('INSERT INTO orders (id) VALUES ($1)', [id]);
 *   await publisher.publish(tx, { subject: 'orders.placed', key: id, type: 'OrderPlaced', data: { id } });
 * });
 */
export interface Publisher<E extends EventMap = EventMap> {
  readonly options: Readonly<Required<PublisherOptions>>;
  publish(tx: Queryable, event: PublishInput<E>): Promise<PublishResult>;
  /** All events in one round trip; results in input order. */
  publishMany(tx: Queryable, events: ReadonlyArray<PublishInput<E>>): Promise<PublishResult[]>;
}
