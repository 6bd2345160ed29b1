import { randomFillSync } from 'node:crypto';
import { checkPublish, isContractRegistry, type PublishStamp } from '@ferry/contracts';
import {
  ConflictError,
  DEFAULT_SCHEMA,
  describeValue,
  encodedSize,
  encodedSizeAtMost,
  encodeEvent,
  InternalError,
  LIMITS,
  MigrationError,
  namedStatement,
  notifyChannel,
  type Queryable,
  quoteIdentifier,
  REPLAY_MSG_ID_EXTRA_BYTES,
  RESERVED_SUBJECT_RULE,
  ReservedSubjectError,
  requireStillInTransaction,
  requireTransaction,
  SQLSTATE,
  sqlState,
  ValidationError,
  VersionOrderError,
  validateEventId,
  validateHeaders,
  validateIdentifier,
  validateKey,
  validateSource,
  validateSubject,
  validateType,
  validateVersion,
} from '@ferry/core';
import { v7 as uuidv7 } from 'uuid';
import { encodeData } from './encode-data.js';
import { insertEventSql, insertEventsSql } from './sql/insert-events.js';
import { type CreateSpans, withCreateSpans } from './tracing.js';
import type {
  AnyContract,
  ContractPublisher,
  ContractRegistry,
  EventMap,
  Publisher,
  PublisherOptions,
  PublishInput,
  PublishResult,
  ResolvedPublisherOptions,
} from './types.js';

const MIN_PAYLOAD = 1024;
const MAX_PAYLOAD = LIMITS.maxEventBytes;
/** 0001-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z: the event times both ce-time and PostgreSQL can hold. */
const MIN_TIME_MS = -62_135_596_800_000;
const MAX_TIME_MS = 253_402_300_799_999;
/** Per batch: PostgreSQL accepts at most 65,535 bind values but arrays travel as one value each; this bounds memory. */
export const MAX_BATCH = 10_000;

export function compilePublisherOptions(options: PublisherOptions): ResolvedPublisherOptions {
  if (typeof options !== 'object' || options === null) {
    throw new ValidationError('options', 'createPublisher needs an options object, e.g. { source: "orders-service" }');
  }
  const schema = validateIdentifier(options.schema ?? DEFAULT_SCHEMA, 'schema');
  const source = validateSource(options.source, 'source');
  const maxPayloadBytes = options.maxPayloadBytes ?? LIMITS.defaultMaxPayloadBytes;
  if (!Number.isInteger(maxPayloadBytes) || maxPayloadBytes < MIN_PAYLOAD || maxPayloadBytes > MAX_PAYLOAD) {
    throw new ValidationError(
      'maxPayloadBytes',
      `maxPayloadBytes must be an integer from ${MIN_PAYLOAD} to ${MAX_PAYLOAD} (match the NATS server's max_payload), got ${describeValue(maxPayloadBytes)}`,
    );
  }
  const notify = options.notify ?? true;
  if (typeof notify !== 'boolean') throw new ValidationError('notify', `notify must be true or false, got ${describeValue(notify)}`);
  const preparedStatements = options.preparedStatements ?? true;
  if (typeof preparedStatements !== 'boolean') {
    throw new ValidationError('preparedStatements', `preparedStatements must be true or false, got ${describeValue(preparedStatements)}`);
  }
  const contracts = options.contracts;
  if (contracts !== undefined && !isContractRegistry(contracts)) {
    throw new ValidationError(
      'contracts',
      `contracts must be a registry made by defineContracts([...]) of @ferry/contracts, got ${describeValue(contracts)}`,
    );
  }
  return Object.freeze({ schema, source, maxPayloadBytes, notify, preparedStatements, contracts });
}

interface NodePostgresClient {
  // biome-ignore lint/suspicious/noExplicitAny: node-postgres types rows as any
  query(config: { name: string; text: string; values: unknown[] }): Promise<{ rows: any[] }>;
}

/** A `pg.Client`/`pg.PoolClient` (not a Pool: a named statement belongs to one connection). */
function isNodePostgresClient(tx: Queryable): tx is Queryable & NodePostgresClient {
  return typeof tx === 'object' && tx !== null && 'connectionParameters' in tx && 'processID' in tx;
}

/** An event validated and encoded, ready for the statement's arrays. */
interface Prepared {
  id: string;
  key: string;
  version: bigint | null;
  subject: string;
  type: string;
  contentType: string;
  data: Buffer;
  headers: Record<string, string>;
  time: Date;
}

/**
 * Random bytes for event ids, 16 at a time from a pool filled 256 ids at a
 * time. uuid's own v7() asks the system for 16 bytes per id, which cost 1.7 µs
 * an id in a loop (and several µs inside a publish); this costs 0.12. Given
 * its own random bytes, v7() orders ids by millisecond only, not within one:
 * the outbox's id index still grows at its right edge.
 */
const RANDOM_POOL = new Uint8Array(16 * 256);
let randomOffset = RANDOM_POOL.length;
function pooledRandom16(): Uint8Array {
  if (randomOffset === RANDOM_POOL.length) {
    randomFillSync(RANDOM_POOL);
    randomOffset = 0;
  }
  randomOffset += 16;
  return RANDOM_POOL.subarray(randomOffset - 16, randomOffset);
}
const UUID_OPTIONS = { rng: pooledRandom16 };

/**
 * A copy of a valid Date as a plain Date, read with Date.prototype's own
 * getTime: a subclass's overridden getTime or toISOString cannot change the
 * time that is stored, checked and sent. `undefined` for anything else.
 */
function plainDate(value: unknown): Date | undefined {
  if (!(value instanceof Date)) return undefined;
  let ms: number;
  try {
    ms = Date.prototype.getTime.call(value);
  } catch {
    return undefined; // an object with Date.prototype that is not a Date
  }
  return Number.isNaN(ms) ? undefined : new Date(ms);
}

class OutboxPublisher<E extends EventMap> implements Publisher<E> {
  readonly options: ResolvedPublisherOptions;
  /** [batch statement, single-event statement], each with its prepared-statement name. */
  readonly #statements: ReadonlyArray<{ name: string; text: string }>;
  readonly #channel: string;

  constructor(options: PublisherOptions) {
    this.options = compilePublisherOptions(options);
    const schema = quoteIdentifier(this.options.schema);
    this.#statements = [insertEventsSql(schema), insertEventSql(schema)].map((text) => namedStatement('publish', text));
    this.#channel = notifyChannel(this.options.schema);
  }

  /**
   * On a node-postgres client the call runs as a named prepared statement,
   * which saves a parse per publish; other Queryables send the text (the
   * functions' own plans are cached by PL/pgSQL either way).
   */
  #run(tx: Queryable, values: unknown[], single: boolean) {
    const statement = this.#statements[single ? 1 : 0] as { name: string; text: string };
    if (this.options.preparedStatements && isNodePostgresClient(tx)) {
      return tx.query({ name: statement.name, text: statement.text, values });
    }
    return tx.query(statement.text, values);
  }

  #prepare(input: PublishInput<E>, field: string, spans?: CreateSpans, stamp?: PublishStamp): Prepared {
    requireEventObject(input, field);
    const subject = validateSubject(input.subject ?? stamp?.subject, `${field}.subject`);
    const key = validateKey(input.key, `${field}.key`);
    const type = validateType(input.type, `${field}.type`);
    const id = input.id === undefined ? uuidv7(UUID_OPTIONS) : validateEventId(input.id, `${field}.id`);
    const version = input.version === undefined ? null : validateVersion(input.version, `${field}.version`);
    let headers = validateHeaders(input.headers, `${field}.headers`);
    // After the check that refuses ce-* names from the caller: only the contract writes these two.
    if (stamp) headers = { ...headers, ...stamp.headers };
    // Tracing: the creation context goes in before the size check, so the check counts it.
    if (spans) headers = spans.headers(headers, { id, key, subject, type }, input.id !== undefined);
    const time = input.time === undefined ? new Date() : plainDate(input.time);
    if (time === undefined) {
      throw new ValidationError(`${field}.time`, `${field}.time must be a valid Date, got ${describeValue(input.time)}`);
    }
    // ce-time is RFC 3339 (four-digit years) and PostgreSQL has no year 0: outside this range
    // toISOString() gives "-000001-…" or "+010000-…", which reached SQL and aborted the caller's transaction.
    if (time.getTime() < MIN_TIME_MS || time.getTime() > MAX_TIME_MS) {
      throw new ValidationError(
        `${field}.time`,
        `${field}.time ${time.toISOString()} is outside the years 0001 to 9999 (UTC) that CloudEvents' ce-time and PostgreSQL can both hold; pass a Date in that range or leave time out (now)`,
      );
    }
    const { bytes, contentType } = encodeData(input.data, input.contentType, field);
    // The wire size of the longest form this event takes: a `ferry replay` copy, whose
    // Nats-Msg-Id is longer than the event id by REPLAY_MSG_ID_EXTRA_BYTES. Checking the
    // relay's form only let events within 32 bytes of the limit in that no replay could send.
    // A bound in a few additions first; the exact encoding only for an event that may be over.
    const sized = { id, key, subject, type, source: this.options.source, contentType, data: bytes, headers };
    if (encodedSizeAtMost(sized) + REPLAY_MSG_ID_EXTRA_BYTES > this.options.maxPayloadBytes) {
      const size = encodedSize(encodeEvent({ ...sized, version: version ?? 1n, time })) + REPLAY_MSG_ID_EXTRA_BYTES;
      if (size > this.options.maxPayloadBytes) {
        throw new ValidationError(
          `${field}.data`,
          `event ${id} encodes to ${size} bytes (as a ferry replay copy, the longest form it takes), over maxPayloadBytes ${this.options.maxPayloadBytes}: store the payload elsewhere and send a reference, or raise maxPayloadBytes together with the NATS server's max_payload`,
        );
      }
    }
    return { id, key, version, subject, type, contentType, data: bytes, headers, time };
  }

  publish(tx: Queryable, event: PublishInput<E>): Promise<PublishResult> {
    return withCreateSpans((spans) => this.#publish(tx, [event], true, spans)).then((r) => r[0] as PublishResult);
  }

  publishMany(tx: Queryable, events: ReadonlyArray<PublishInput<E>>): Promise<PublishResult[]> {
    return withCreateSpans((spans) => this.#publish(tx, events, false, spans));
  }

  async #publish(tx: Queryable, events: ReadonlyArray<PublishInput<E>>, single: boolean, spans?: CreateSpans): Promise<PublishResult[]> {
    if (!tx || typeof (tx as Queryable).query !== 'function') {
      throw new ValidationError(
        'tx',
        'publish needs the transaction to write in: a pg client inside BEGIN (or fromKysely/fromKnex/fromDrizzle/fromPostgresJs(trx)); use withTransaction(pool, fn) if you have none',
      );
    }
    // A pool, or a connection with no BEGIN, would commit the event at once: not atomic with the caller's writes.
    requireTransaction(tx);
    if (!Array.isArray(events)) throw new ValidationError('events', `publishMany needs an array of events, got ${describeValue(events)}`);
    if (events.length === 0) return [];
    if (events.length > MAX_BATCH) {
      throw new ValidationError('events', `publishMany got ${events.length} events; the limit per call is ${MAX_BATCH}: split the array`);
    }
    const field = (i: number) => (single ? 'event' : `events[${i}]`);
    // With contracts, every event is checked before any is encoded or written.
    const stamps = this.options.contracts ? await checkAll(this.options.contracts, events, field) : undefined;
    const prepared = events.map((e, i) => this.#prepare(e, field(i), spans, stamps?.[i]));
    const ids = new Set<string>();
    const explicitKeys = new Map<string, boolean>();
    const lastVersion = new Map<string, bigint>();
    prepared.forEach((p, i) => {
      if (ids.has(p.id))
        throw new ValidationError(`events[${i}].id`, `event id ${p.id} appears twice in one publishMany; give each event its own id`);
      ids.add(p.id);
      const explicit = p.version !== null;
      const seen = explicitKeys.get(p.key);
      if (seen !== undefined && seen !== explicit) {
        throw new ValidationError(
          `events[${i}].version`,
          `key ${describeValue(p.key)} has events both with and without a version in one publishMany; give all of them a version or none`,
        );
      }
      explicitKeys.set(p.key, explicit);
      if (p.version !== null) {
        // Stored in array order, so versions that do not increase would be stored out of order.
        const last = lastVersion.get(p.key);
        if (last !== undefined && p.version <= last) {
          throw new ValidationError(
            `events[${i}].version`,
            `key ${describeValue(p.key)} has version ${p.version} after version ${last} in one publishMany; give one key's versions in increasing order`,
          );
        }
        lastVersion.set(p.key, p.version);
      }
    });

    const one = prepared.length === 1 ? (prepared[0] as Prepared) : undefined;
    const values: unknown[] = one
      ? [
          one.id,
          one.key,
          one.version === null ? null : one.version.toString(),
          one.subject,
          one.type,
          this.options.source,
          one.contentType,
          one.data,
          JSON.stringify(one.headers),
          one.time.toISOString(),
        ]
      : [
          prepared.map((p) => p.id),
          prepared.map((p) => p.key),
          prepared.map((p) => (p.version === null ? null : p.version.toString())),
          prepared.map((p) => p.subject),
          prepared.map((p) => p.type),
          prepared.map(() => this.options.source),
          prepared.map((p) => p.contentType),
          prepared.map((p) => p.data),
          prepared.map((p) => JSON.stringify(p.headers)),
          prepared.map((p) => p.time.toISOString()),
        ];
    values.push(
      this.options.notify ? this.#channel : null,
      events.some((e) => e.id !== undefined),
    );

    let rows: Array<{ id: string | null; seq: string | null; version: string | null; existing: boolean; same: boolean }>;
    try {
      ({ rows } = await this.#run(tx, values, one !== undefined));
    } catch (err) {
      throw this.#translate(err, prepared);
    }
    requireStillInTransaction(tx);
    const byId = new Map<string, PublishResult>();
    for (const r of rows) {
      if (r.id === null) continue; // the notify row
      if (r.seq === null && !r.existing) {
        // The functions' version guard (migration 000006): refused, nothing written.
        const p = prepared.find((x) => x.id === r.id);
        throw new VersionOrderError(
          `event ${r.id} has version ${p?.version} but key ${describeValue(p?.key)} has already had version ${r.version}; nothing was written. Publish without a version (the next one is assigned) or with one above ${r.version}`,
          { eventId: r.id, key: p?.key ?? '', version: p?.version ?? 0n, recorded: BigInt(r.version as string) },
        );
      }
      if (!r.same) {
        throw new ConflictError(
          `event id ${r.id} is already in the outbox with other content (key, subject, type, data, headers or version differ); nothing was written. Use a new id for a new event`,
          { eventId: r.id },
        );
      }
      byId.set(r.id, { id: r.id, key: '', version: BigInt(r.version as string), seq: BigInt(r.seq as string), existing: r.existing });
    }
    const results = prepared.map((p) => {
      const r = byId.get(p.id);
      if (!r) throw new InternalError(`ferry: no outbox row came back for event ${p.id}; this is a bug, please report it`);
      return { ...r, key: p.key };
    });
    return results;
  }

  #translate(err: unknown, prepared: Prepared[]): unknown {
    const refused = refusedByPublishFunction(err);
    if (refused) return refused;
    const state = sqlState(err);
    // No schema, or one without the publish functions: PostgreSQL's own words do not say what to run.
    if (state === SQLSTATE.invalidSchemaName || state === SQLSTATE.undefinedFunction || state === SQLSTATE.undefinedTable) {
      const s = this.options.schema;
      return new MigrationError(
        `schema "${s}" has no Ferry outbox (${(err as Error).message}): run \`ferry migrate --schema ${s}\` (or migrate({ pool, schema: '${s}' })) against this database, or pass createPublisher({ schema }) the schema you migrated; this transaction is aborted: roll it back`,
        { cause: err },
      );
    }
    if (state !== SQLSTATE.uniqueViolation) return err;
    const constraint = (err as { constraint?: string }).constraint;
    if (constraint === 'outbox_id_key') {
      return new ConflictError(
        `an event with one of the ids [${prepared.map((p) => p.id).join(', ')}] was published by a concurrent transaction that has now committed; this transaction is aborted: roll it back and retry, and the retry returns the stored event`,
        { cause: err },
      );
    }
    if (constraint === 'outbox_key_version_key') {
      return new ConflictError(
        `a caller-supplied version is already used by another event of the same key (${(err as { detail?: string }).detail ?? 'see cause'}); this transaction is aborted: roll it back and publish with the next version or without one`,
        { cause: err },
      );
    }
    return err;
  }
}

function requireEventObject(input: unknown, field: string): asserts input is object {
  if (typeof input !== 'object' || input === null) {
    throw new ValidationError(field, `${field} must be an event object with subject, key, type and data, got ${describeValue(input)}`);
  }
}

/** Each event's contract stamp, in input order; one promise only when a validator is asynchronous. */
function checkAll(
  registry: ContractRegistry,
  events: ReadonlyArray<unknown>,
  field: (i: number) => string,
): PublishStamp[] | Promise<PublishStamp[]> {
  const stamps = events.map((e, i) => {
    requireEventObject(e, field(i));
    return checkPublish(registry, e, field(i));
  });
  return stamps.some((s) => s instanceof Promise) ? Promise.all(stamps) : (stamps as PublishStamp[]);
}

/**
 * The publish functions' own checks (migration 000005) raise SQLSTATE 22023
 * with COLUMN naming the field: that becomes a `ValidationError` on the field,
 * as if the publisher had caught it before any SQL; a subject NATS reserves
 * (CONSTRAINT `reserved_subject`, migration 000016) a `ReservedSubjectError`.
 * Returns `undefined` for any other error.
 */
export function refusedByPublishFunction(err: unknown): ValidationError | undefined {
  if (sqlState(err) !== SQLSTATE.invalidParameterValue) return undefined;
  const column = (err as { column?: unknown }).column;
  if (typeof column !== 'string' || column === '') return undefined;
  const message = `the outbox refused the event: ${(err as Error).message}`;
  if ((err as { constraint?: unknown }).constraint === RESERVED_SUBJECT_RULE) {
    return new ReservedSubjectError(column, undefined, message, { cause: err });
  }
  return new ValidationError(column, message, { cause: err });
}

/**
 * Creates a publisher: writes events into the outbox on the caller's
 * connection, in the caller's transaction (see {@link PublisherOptions} for
 * the options and their defaults). Options are validated here, once: a bad
 * one throws a `ValidationError` naming it.
 *
 * @example
 * type OrderEvents = { OrderPlaced: { id: string; total: number } };
 * const publisher = createPublisher<OrderEvents>({ source: 'orders-service' });
 */
export function createPublisher<C extends AnyContract>(
  options: PublisherOptions & { contracts: ContractRegistry<C> },
): ContractPublisher<C>;
export function createPublisher<E extends EventMap = EventMap>(options: PublisherOptions): Publisher<E>;
export function createPublisher(options: PublisherOptions): Publisher<EventMap> {
  return new OutboxPublisher<EventMap>(options);
}
