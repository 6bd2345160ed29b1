import { createHash } from 'node:crypto';
import {
  ConflictError,
  DEFAULT_SCHEMA,
  describeValue,
  encodedSize,
  encodeEvent,
  JSON_CONTENT_TYPE,
  LIMITS,
  MigrationError,
  notifyChannel,
  type Queryable,
  quoteIdentifier,
  SQLSTATE,
  sqlState,
  ValidationError,
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
import { insertEventSql, insertEventsSql } from './sql/insert-events.js';
import type { EventMap, Publisher, PublisherOptions, PublishInput, PublishResult } from './types.js';

const MIN_PAYLOAD = 1024;
const MAX_PAYLOAD = 64 * 1024 * 1024;
const CONTENT_TYPE = /^[a-z0-9][a-z0-9!#$&^_.+-]*\/[a-z0-9][a-z0-9!#$&^_.+-]*(\s*;.*)?$/i;
/** Per batch: PostgreSQL accepts at most 65,535 bind values but arrays travel as one value each; this bounds memory. */
export const MAX_BATCH = 10_000;

export function compilePublisherOptions(options: PublisherOptions): Readonly<Required<PublisherOptions>> {
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
  const notify = options.notify ?? false;
  if (typeof notify !== 'boolean') throw new ValidationError('notify', `notify must be true or false, got ${describeValue(notify)}`);
  const preparedStatements = options.preparedStatements ?? true;
  if (typeof preparedStatements !== 'boolean') {
    throw new ValidationError('preparedStatements', `preparedStatements must be true or false, got ${describeValue(preparedStatements)}`);
  }
  return Object.freeze({ schema, source, maxPayloadBytes, notify, preparedStatements });
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

function encodeData(data: unknown, contentType: unknown, field: string): { bytes: Buffer; contentType: string } {
  if (contentType !== undefined && (typeof contentType !== 'string' || !CONTENT_TYPE.test(contentType))) {
    throw new ValidationError(
      `${field}.contentType`,
      `${field}.contentType ${describeValue(contentType)} is not a MIME type such as "application/json"`,
    );
  }
  if (data instanceof Uint8Array) {
    if (contentType === undefined) {
      throw new ValidationError(`${field}.contentType`, `${field}.data is bytes: give contentType too, e.g. "application/octet-stream"`);
    }
    return { bytes: Buffer.from(data.buffer, data.byteOffset, data.byteLength), contentType: contentType as string };
  }
  let text: string | undefined;
  try {
    text = JSON.stringify(data);
  } catch (err) {
    throw new ValidationError(
      `${field}.data`,
      `${field}.data is not JSON-serialisable (${(err as Error).message}); convert it first, e.g. bigint to string`,
      {
        cause: err,
      },
    );
  }
  if (text === undefined) {
    throw new ValidationError(
      `${field}.data`,
      `${field}.data is ${describeValue(data)}, which has no JSON form; pass an object, array, string, number, boolean or null`,
    );
  }
  return { bytes: Buffer.from(text, 'utf8'), contentType: (contentType as string | undefined) ?? JSON_CONTENT_TYPE };
}

class OutboxPublisher<E extends EventMap> implements Publisher<E> {
  readonly options: Readonly<Required<PublisherOptions>>;
  /** [batch statement, single-event statement], each with its prepared-statement name. */
  readonly #statements: ReadonlyArray<{ name: string; text: string }>;
  readonly #channel: string;

  constructor(options: PublisherOptions) {
    this.options = compilePublisherOptions(options);
    const schema = quoteIdentifier(this.options.schema);
    this.#statements = [insertEventsSql(schema), insertEventSql(schema)].map((text) => ({
      name: `ferry_publish_${createHash('sha1').update(text).digest('hex').slice(0, 16)}`,
      text,
    }));
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

  #prepare(input: PublishInput<E>, field: string): Prepared {
    if (typeof input !== 'object' || input === null) {
      throw new ValidationError(field, `${field} must be an event object with subject, key, type and data, got ${describeValue(input)}`);
    }
    const subject = validateSubject(input.subject, `${field}.subject`);
    const key = validateKey(input.key, `${field}.key`);
    const type = validateType(input.type, `${field}.type`);
    const id = input.id === undefined ? uuidv7() : validateEventId(input.id, `${field}.id`);
    const version = input.version === undefined ? null : validateVersion(input.version, `${field}.version`);
    const headers = validateHeaders(input.headers, `${field}.headers`);
    const time = input.time ?? new Date();
    if (!(time instanceof Date) || Number.isNaN(time.getTime())) {
      throw new ValidationError(`${field}.time`, `${field}.time must be a valid Date, got ${describeValue(input.time)}`);
    }
    const { bytes, contentType } = encodeData(input.data, input.contentType, field);
    const size = encodedSize(
      encodeEvent({ id, key, version: version ?? 1n, subject, type, source: this.options.source, time, contentType, data: bytes, headers }),
    );
    if (size > this.options.maxPayloadBytes) {
      throw new ValidationError(
        `${field}.data`,
        `event ${id} encodes to ${size} bytes, over maxPayloadBytes ${this.options.maxPayloadBytes}: store the payload elsewhere and send a reference, or raise maxPayloadBytes together with the NATS server's max_payload`,
      );
    }
    return { id, key, version, subject, type, contentType, data: bytes, headers, time };
  }

  publish(tx: Queryable, event: PublishInput<E>): Promise<PublishResult> {
    return this.#publish(tx, [event], true).then((r) => r[0] as PublishResult);
  }

  publishMany(tx: Queryable, events: ReadonlyArray<PublishInput<E>>): Promise<PublishResult[]> {
    return this.#publish(tx, events, false);
  }

  async #publish(tx: Queryable, events: ReadonlyArray<PublishInput<E>>, single: boolean): Promise<PublishResult[]> {
    if (!tx || typeof (tx as Queryable).query !== 'function') {
      throw new ValidationError(
        'tx',
        'publish needs the transaction to write in: a pg client inside BEGIN (or fromKysely/fromKnex/fromDrizzle/fromPostgresJs(trx)); use withTransaction(pool, fn) if you have none',
      );
    }
    if (!Array.isArray(events)) throw new ValidationError('events', `publishMany needs an array of events, got ${describeValue(events)}`);
    if (events.length === 0) return [];
    if (events.length > MAX_BATCH) {
      throw new ValidationError('events', `publishMany got ${events.length} events; the limit per call is ${MAX_BATCH}: split the array`);
    }
    const prepared = events.map((e, i) => this.#prepare(e, single ? 'event' : `events[${i}]`));
    const ids = new Set<string>();
    const explicitKeys = new Map<string, boolean>();
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
    const byId = new Map<string, PublishResult>();
    for (const r of rows) {
      if (r.id === null) continue; // the notify row
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
      if (!r) throw new Error(`ferry: no outbox row came back for event ${p.id}; this is a bug, please report it`);
      return { ...r, key: p.key };
    });
    return results;
  }

  #translate(err: unknown, prepared: Prepared[]): unknown {
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

/**
 * Creates a publisher. Options are validated here, once.
 *
 * @example
 * type OrderEvents = { OrderPlaced: { id: string; total: number } };
 * const publisher = createPublisher<OrderEvents>({ source: 'orders-service' });
 */
export function createPublisher<E extends EventMap = EventMap>(options: PublisherOptions): Publisher<E> {
  return new OutboxPublisher<E>(options);
}
