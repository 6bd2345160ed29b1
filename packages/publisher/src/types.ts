import type { AnyContract, ContractInput, ContractRegistry, Latest } from '@ferry/contracts';

export type { AnyContract, ContractRegistry };

import type { EventMap, Queryable } from '@ferry/core';

/** Event type → payload shape (core's `EventMap`). `createPublisher<MyEvents>()` makes `publish` check `data` against `type`. */
export type { EventMap };

/** The fields of an event besides its type, data and subject. */
export interface EventFields {
  /** Partition / aggregate key (1-256 characters). Order is kept per key. */
  key: string;
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
}

/** One event to publish. */
export type PublishInput<E extends EventMap = EventMap> = {
  [T in keyof E & string]: EventFields & {
    /** NATS subject, e.g. `orders.placed`. No wildcards. */
    subject: string;
    /** Event type, e.g. `OrderPlaced`. */
    type: T;
    /**
     * JSON-serialisable payload, or raw bytes together with `contentType`: a
     * Uint8Array/Buffer, any other typed array or DataView (its bytes as laid
     * out in memory), or an ArrayBuffer. A value JSON would silently change
     * (a Map, Set, RegExp, Error, nested bytes, NaN, a function) is refused.
     */
    data: E[T] | Uint8Array | ArrayBuffer | ArrayBufferView;
  };
}[keyof E & string];

/**
 * One event to publish through a publisher given `contracts`: `data` is what
 * the contract's validator accepts, at the type's newest version or at
 * `contractVersion`, and `subject` defaults to the contract's.
 */
export type ContractPublishInput<C extends AnyContract> =
  | {
      [T in C['type']]: EventFields & {
        type: T;
        /** NATS subject; default the contract's `subject`. */
        subject?: string;
        data: ContractInput<Latest<C, T>>;
        /** The contract version `data` follows; default the type's newest. */
        contractVersion?: undefined;
      };
    }[C['type']]
  | (C extends AnyContract
      ? EventFields & { type: C['type']; subject?: string; data: ContractInput<C>; contractVersion: C['version'] }
      : never);

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
  /**
   * The event contracts (`defineContracts()` of `@ferry/contracts`): `publish` then
   * checks `data` against its type's contract before anything is written, throws a
   * `ContractValidationError` naming each issue when it does not fit, and stamps the
   * event with its contract (`ce-dataschema`, `ce-dataversion`). Every type published
   * must have a contract. Default none: no check, no cost. See docs/contracts.md.
   */
  contracts?: ContractRegistry;
}

/** The options as a publisher holds them: each default applied. */
export type ResolvedPublisherOptions = Readonly<Required<Omit<PublisherOptions, 'contracts'>>> & {
  readonly contracts: ContractRegistry | undefined;
};

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
export interface Publisher<E extends EventMap = EventMap, I = PublishInput<E>> {
  readonly options: ResolvedPublisherOptions;
  publish(tx: Queryable, event: I): Promise<PublishResult>;
  /** All events in one round trip; results in input order. With contracts, every event is checked before any is written. */
  publishMany(tx: Queryable, events: ReadonlyArray<I>): Promise<PublishResult[]>;
}

/** A publisher given `contracts`: `publish` is typed, checked and stamped by them. */
export type ContractPublisher<C extends AnyContract> = Publisher<EventMap, ContractPublishInput<C>>;
