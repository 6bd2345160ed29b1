import type { FerryEvent } from './envelope.js';
import { describeValue, ValidationError } from './errors.js';
import { CONTROL_CHARACTER, isReservedHeader, TRACE_HEADERS, validateKey } from './validate.js';

/**
 * Wire header names: CloudEvents 1.0, NATS protocol binding, binary mode.
 * The one place these strings are spelled.
 */
export const WIRE_HEADERS = {
  msgId: 'Nats-Msg-Id',
  specVersion: 'ce-specversion',
  id: 'ce-id',
  source: 'ce-source',
  type: 'ce-type',
  time: 'ce-time',
  subject: 'ce-subject',
  partitionKey: 'ce-partitionkey',
  sequence: 'ce-sequence',
  contentType: 'Content-Type',
  /** CloudEvents `dataschema`: the contract the data was checked against (`@ferry/contracts`); absent without one. */
  dataschema: 'ce-dataschema',
  /** Ferry's CloudEvents extension: the contract version of the data (1, 2, 3…); absent without a contract. */
  dataversion: 'ce-dataversion',
} as const;

/**
 * The two `ce-*` headers an event carries in its `headers` rather than in a
 * field of its own: the publisher stamps them from a contract, the codec
 * passes them through under these exact names, and they are never taken from
 * a caller's `headers` (reserved like every `ce-*` name).
 */
export const CONTRACT_HEADERS: readonly string[] = [WIRE_HEADERS.dataschema, WIRE_HEADERS.dataversion];

/** The contract headers of `headers` that are well formed, as wire pairs. */
function contractHeaders(headers: unknown): Array<readonly [string, string]> {
  if (typeof headers !== 'object' || headers === null) return [];
  const out: Array<readonly [string, string]> = [];
  for (const name of CONTRACT_HEADERS) {
    const value = Object.hasOwn(headers, name) ? (headers as Record<string, unknown>)[name] : undefined;
    if (typeof value === 'string' && value.length > 0 && value.length <= 1024 && !CONTROL_CHARACTER.test(value)) out.push([name, value]);
  }
  return out;
}

export const SPEC_VERSION = '1.0';
/** Width of the zero-padded `ce-sequence`: wide enough for any unsigned 64-bit value, so text order is numeric order. */
export const SEQUENCE_WIDTH = 20;

export interface EncodedEvent {
  readonly subject: string;
  /** Header name/value pairs in a stable order. */
  readonly headers: ReadonlyArray<readonly [string, string]>;
  readonly body: Uint8Array;
}

export interface EncodeOptions {
  /** `Nats-Msg-Id`; defaults to the event id. `ferry replay` passes a distinct one. */
  msgId?: string;
}

export function formatSequence(version: bigint): string {
  return version.toString().padStart(SEQUENCE_WIDTH, '0');
}

/**
 * Event → NATS headers + body.
 *
 * `event.headers` may come from a stored outbox row that was not written by
 * the publisher (a hand-made INSERT, an old row, a hostile `p_headers`), so it
 * is not trusted: a name that is reserved (`ce-*`, `Nats-*`, `Content-Type`,
 * in any case), a second spelling of a name already given, or a value that is
 * not a string is left out. The reserved headers come last and only from the
 * event's own fields, so a caller that copies these pairs into a message with
 * `set` or `append` (the relay) or into a record (`Object.fromEntries`) cannot
 * let a user header replace or duplicate one of them: no two names are the
 * same, in any case.
 */
export function encodeEvent(event: FerryEvent, options: EncodeOptions = {}): EncodedEvent {
  const headers: Array<readonly [string, string]> = [];
  const user: unknown = event.headers;
  if (typeof user === 'object' && user !== null && !Array.isArray(user)) {
    const seen = new Set<string>();
    for (const [name, value] of Object.entries(user)) {
      const lower = name.toLowerCase();
      if (typeof value !== 'string' || isReservedHeader(name) || seen.has(lower)) continue;
      seen.add(lower);
      headers.push([name, value]);
    }
  }
  headers.push(
    [WIRE_HEADERS.msgId, options.msgId ?? event.id],
    [WIRE_HEADERS.specVersion, SPEC_VERSION],
    [WIRE_HEADERS.id, event.id],
    [WIRE_HEADERS.source, event.source],
    [WIRE_HEADERS.type, event.type],
    [WIRE_HEADERS.time, event.time.toISOString()],
    [WIRE_HEADERS.subject, event.subject],
    [WIRE_HEADERS.partitionKey, event.key],
    [WIRE_HEADERS.sequence, formatSequence(event.version)],
    [WIRE_HEADERS.contentType, event.contentType],
    ...contractHeaders(user),
  );
  return { subject: event.subject, headers, body: event.data };
}

const NATS_HEADER_PREAMBLE = 'NATS/1.0\r\n'.length;
/** Bytes the message takes against the server's `max_payload` (headers block + body). */
export function encodedSize(encoded: EncodedEvent): number {
  let size = NATS_HEADER_PREAMBLE + 2; // preamble and the closing CRLF
  for (const [name, value] of encoded.headers) size += Buffer.byteLength(name) + 2 + Buffer.byteLength(value) + 2;
  return size + encoded.body.byteLength;
}

/** What `encodedSizeAtMost` needs of an event: its strings, its headers and the length of its body. */
export interface SizedEvent {
  readonly id: string;
  readonly source: string;
  readonly type: string;
  readonly subject: string;
  readonly key: string;
  readonly contentType: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly data: Uint8Array;
}

/** The reserved headers' names and fixed framing, in bytes: 10 headers, each `name: value\r\n`. */
const RESERVED_FRAMING = Object.values(WIRE_HEADERS).reduce((n, name) => n + name.length + 4, NATS_HEADER_PREAMBLE + 2);
/** `ce-time` of any Date (`+275760-09-13T00:00:00.000Z` is the longest), `ce-sequence`, `ce-specversion`. */
const FIXED_VALUES = 27 + SEQUENCE_WIDTH + SPEC_VERSION.length;

/**
 * An upper bound of `encodedSize(encodeEvent(event, { msgId }))` for a msgId
 * of at most `msgIdLength` UTF-16 units, in a few additions: each string
 * counts 3 bytes per UTF-16 unit, UTF-8's most. It holds for the event's
 * `time` if that is a genuine Date (whose ISO form has at most 27 characters)
 * and for any `version` that fits a PostgreSQL bigint (at most 20 digits);
 * neither is read. The publisher calls it on every event and encodes exactly
 * only when the bound is over its limit.
 */
export function encodedSizeAtMost(event: SizedEvent, msgIdLength = event.id.length): number {
  let units = msgIdLength + event.id.length + event.source.length + event.type.length + event.subject.length + event.key.length;
  units += event.contentType.length;
  let size = RESERVED_FRAMING + FIXED_VALUES;
  for (const name in event.headers) {
    if (!Object.hasOwn(event.headers, name)) continue;
    const value = event.headers[name];
    units += name.length + (typeof value === 'string' ? value.length : 0);
    size += 4;
  }
  return size + 3 * units + event.data.byteLength;
}

/** Reads one header; `undefined` when absent. Works with nats.js `MsgHdrs` via `(n) => hdrs?.get(n) || undefined`. */
export type HeaderReader = (name: string) => string | undefined;

/**
 * A record of headers as a reader, by exact name: NATS header names are case-sensitive (nats.js
 * `MsgHdrs.get` matches `Match.Exact` unless told otherwise, and nats-server reads `Nats-Msg-Id`
 * only so spelled), and Ferry reads them as NATS does (see `decodeMessage`).
 */
export function headerReader(headers: Readonly<Record<string, string>>): HeaderReader {
  // A Map, not `headers[name]`: a name such as `constructor` must not find Object.prototype's.
  const exact = new Map(Object.entries(headers));
  return (name) => exact.get(name);
}

/**
 * A nats.js message's headers (`MsgHdrs`, which iterates as name → values)
 * as a reader and the list of their names, read once. `MsgHdrs.get` filters
 * a fresh list of every name on each call, and `decodeEvent` reads a dozen
 * headers. The reader answers as `(n) => hdrs.get(n) || undefined` does:
 * the exact name, its first value, `undefined` for an empty one.
 */
export function natsHeaderReader(hdrs: Iterable<[string, string[]]> | undefined): { read: HeaderReader; names: string[] } {
  return pairsReader(headerPairs(hdrs));
}

/**
 * A message's headers as name/value pairs, one per value, in the order they came: what the
 * inbox's parking lot keeps of a stream message, and what `decodeMessage` reads.
 */
export function headerPairs(hdrs: Iterable<[string, string[]]> | undefined): Array<[string, string]> {
  const pairs: Array<[string, string]> = [];
  if (hdrs) for (const [name, values] of hdrs) for (const v of values) pairs.push([name, v]);
  return pairs;
}

/** Pairs as `natsHeaderReader` reads a message: the exact name, its first value, none for an empty one. */
function pairsReader(pairs: Iterable<readonly [string, string]>): { read: HeaderReader; names: string[] } {
  const seen = new Set<string>();
  const first = new Map<string, string>();
  for (const [name, value] of pairs) {
    if (seen.has(name)) continue;
    seen.add(name);
    if (value) first.set(name, value);
  }
  return { read: (name) => first.get(name), names: [...first.keys()] };
}

/** The headers `decodeEvent` reads, by lower-case name. */
const DECODED_HEADERS = new Map(
  [
    WIRE_HEADERS.specVersion,
    WIRE_HEADERS.id,
    WIRE_HEADERS.source,
    WIRE_HEADERS.type,
    WIRE_HEADERS.time,
    WIRE_HEADERS.subject,
    WIRE_HEADERS.partitionKey,
    WIRE_HEADERS.sequence,
    WIRE_HEADERS.contentType,
    ...CONTRACT_HEADERS,
  ].map((name) => [name.toLowerCase(), name] as const),
);

/**
 * The one decoder of a Ferry message, for every path that applies one: the inbox's stream
 * messages and its parked and early copies (which keep the message's headers as pairs), so a
 * message one path refuses is refused by all. Headers are read by exact name, as NATS reads them
 * (`headerReader` says why); a header that is one `decodeEvent` reads spelled in another case
 * (`CE-SEQUENCE`, `content-type`) is refused, naming it: ignoring it would misread the event (a
 * JSON body declared by `content-type` handed over as bytes), reading it would make Ferry the one
 * NATS client that does. Of a header given twice, the first value counts, as `MsgHdrs.get` gives.
 * The key and the id are checked as the publisher checks them (length, control characters).
 * Throws `ValidationError`, its field the header at fault.
 *
 * @example
 * const event = decodeMessage(headerPairs(msg.headers), msg.data, msg.subject);
 */
export function decodeMessage(headers: Iterable<readonly [string, string]>, body: Uint8Array, natsSubject?: string): FerryEvent {
  const pairs = [...headers];
  for (const [name] of pairs) {
    const wire = DECODED_HEADERS.get(name.toLowerCase());
    if (wire !== undefined && wire !== name) {
      throw new ValidationError(
        wire,
        `header ${describeValue(name)} is ${wire} spelled in another case: NATS header names are case-sensitive, and Ferry reads ${wire} only so spelled; publish it as ${wire}`,
      );
    }
  }
  const { read, names } = pairsReader(pairs);
  const event = decodeEvent(read, body, natsSubject, names);
  validateKey(event.key, WIRE_HEADERS.partitionKey);
  validateKey(event.id, WIRE_HEADERS.id);
  return event;
}

const DIGITS = /^[0-9]{1,20}$/;
/** Versions are PostgreSQL bigints. */
const MAX_VERSION = 9_223_372_036_854_775_807n;

function required(read: HeaderReader, name: string): string {
  const v = read(name);
  if (v === undefined || v === '') {
    throw new ValidationError(name, `message has no ${name} header: it is not a Ferry/CloudEvents binary-mode event`);
  }
  return v;
}

/**
 * NATS headers + body → event. Throws `ValidationError` (field = the header
 * at fault) for anything that is not a well-formed Ferry event. Its parts only:
 * a consumer decodes with `decodeMessage`, which also checks header case, the
 * key and the id.
 *
 * @param userHeaderNames names of non-CloudEvents headers to keep in `event.headers`
 *   (nats.js exposes `MsgHdrs.keys()`); trace headers are always kept.
 */
export function decodeEvent(
  read: HeaderReader,
  body: Uint8Array,
  natsSubject?: string,
  userHeaderNames: Iterable<string> = [],
): FerryEvent {
  const spec = required(read, WIRE_HEADERS.specVersion);
  if (spec !== SPEC_VERSION) {
    throw new ValidationError(
      WIRE_HEADERS.specVersion,
      `unsupported ${WIRE_HEADERS.specVersion} ${describeValue(spec)}; Ferry reads ${SPEC_VERSION}`,
    );
  }
  const id = required(read, WIRE_HEADERS.id);
  const source = required(read, WIRE_HEADERS.source);
  const type = required(read, WIRE_HEADERS.type);
  const key = required(read, WIRE_HEADERS.partitionKey);
  const seq = required(read, WIRE_HEADERS.sequence);
  if (!DIGITS.test(seq) || BigInt(seq) < 1n || BigInt(seq) > MAX_VERSION) {
    throw new ValidationError(
      WIRE_HEADERS.sequence,
      `${WIRE_HEADERS.sequence} ${describeValue(seq)} is not a positive decimal version of at most 2^63-1`,
    );
  }
  const timeText = read(WIRE_HEADERS.time);
  const time = timeText === undefined ? new Date(0) : new Date(timeText);
  if (Number.isNaN(time.getTime())) {
    throw new ValidationError(WIRE_HEADERS.time, `${WIRE_HEADERS.time} ${describeValue(timeText)} is not an RFC 3339 timestamp`);
  }
  const subject = read(WIRE_HEADERS.subject) ?? natsSubject ?? '';
  // Collected in a Map and built with fromEntries: a header named `__proto__`
  // becomes an own entry, where `headers[name] = v` would set the prototype.
  const kept = new Map<string, string>();
  for (const name of userHeaderNames) {
    if (isReservedHeader(name)) continue;
    const v = read(name);
    if (v !== undefined) kept.set(name, v);
  }
  for (const name of [...TRACE_HEADERS, ...CONTRACT_HEADERS]) {
    const v = read(name);
    if (v !== undefined) kept.set(name, v);
  }
  const headers: Record<string, string> = Object.fromEntries(kept);
  return {
    id,
    key,
    version: BigInt(seq),
    subject,
    type,
    source,
    time,
    contentType: read(WIRE_HEADERS.contentType) ?? 'application/octet-stream',
    data: body,
    headers,
  };
}
