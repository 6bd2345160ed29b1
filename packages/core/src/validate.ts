import { describeValue, ReservedSubjectError, ValidationError } from './errors.js';

/** Limits enforced on every event before any I/O. */
export const LIMITS = {
  keyMaxLength: 256,
  typeMaxLength: 256,
  subjectMaxLength: 1024,
  sourceMaxLength: 1024,
  headerCountMax: 64,
  headerNameMaxLength: 128,
  headerValueMaxLength: 4096,
  defaultMaxPayloadBytes: 1_048_576,
  /**
   * The most bytes an event's data may have, whatever maxPayloadBytes says: 64 MiB, the largest
   * max_payload a NATS server accepts. The publish functions refuse more (outbox migration 000009),
   * and the relay never loads a row's data past it (it measures the row in SQL first).
   */
  maxEventBytes: 67_108_864,
} as const;

// A NATS publish subject: dot-separated non-empty tokens of printable
// non-space characters, no wildcards (`*`, `>`).
// biome-ignore lint/suspicious/noControlCharactersInRegex: we are rejecting control characters
const SUBJECT_TOKEN = /^[^\s.*>\u0000-\u001f\u007f]+$/u;

/**
 * A lone UTF-16 surrogate cannot be stored: PostgreSQL text is UTF-8, and the driver would write
 * U+FFFD in its place, so the row would carry another key (or subject, type) than the one given.
 */
function refuseLoneSurrogate(value: string, field: string, what: string): void {
  if (/\p{Cs}/u.test(value)) {
    throw new ValidationError(
      field,
      `${what} ${describeValue(value)} contains a lone UTF-16 surrogate, which UTF-8 (and so PostgreSQL) cannot hold; pass well-formed text`,
    );
  }
}

/**
 * First tokens of a subject that NATS itself uses, besides every first token that starts with `$`
 * (`$JS` JetStream's API, `$SYS`, `$KV`, `$O`, `$MQTT`, `$GR`, `$LDS`, …): `_INBOX` (request
 * replies, the relay's PubAcks among them), `_R_` (service import replies) and `_GR_` (gateway
 * replies). NATS reserves them ("Reserved names", https://docs.nats.io/nats-concepts/subjects;
 * the last two are nats-server's reply prefixes); subjects are case-sensitive, so `_inbox` is not
 * one of them. Shared with outbox migration 000016, which refuses the same subjects in SQL.
 */
export const RESERVED_SUBJECT_TOKENS = ['_INBOX', '_R_', '_GR_'] as const;

/**
 * The reserved first token of `subject` (`$JS`, `$SYS`, `_INBOX`, …), or undefined when it is an
 * ordinary subject. A message published to a reserved subject is not an event: to `$JS.API.…` it
 * is a command to JetStream (delete a stream, purge it, delete a consumer), answered to the relay.
 */
export function reservedSubjectToken(subject: string): string | undefined {
  const first = subject.split('.', 1)[0] ?? '';
  if (first.startsWith('$')) return first;
  return (RESERVED_SUBJECT_TOKENS as readonly string[]).includes(first) ? first : undefined;
}

/**
 * The rule's name where a reserved subject is refused: the CONSTRAINT of the publish functions'
 * 22023 error (outbox migration 000016), and the relay's failure reason for a stored row.
 */
export const RESERVED_SUBJECT_RULE = 'reserved_subject';

/** The refusal of a reserved subject, in the words the publisher, the database and the relay all use. */
export function reservedSubjectMessage(subject: string, field = 'subject'): string {
  return `${field} ${describeValue(subject)} is reserved by NATS: a first token that starts with "$" ($JS, $SYS, $KV, …) or is ${RESERVED_SUBJECT_TOKENS.join(', ')} addresses the server, JetStream's API or a client's replies, not a stream; publish to a subject of your own, e.g. "orders.placed"`;
}

export function validateSubject(subject: unknown, field = 'subject'): string {
  if (typeof subject !== 'string' || subject.length === 0) {
    throw new ValidationError(field, `${field} must be a non-empty string, got ${describeValue(subject)}`);
  }
  if (subject.length > LIMITS.subjectMaxLength) {
    throw new ValidationError(field, `${field} is ${subject.length} characters; the limit is ${LIMITS.subjectMaxLength}`);
  }
  refuseLoneSurrogate(subject, field, field);
  for (const token of subject.split('.')) {
    if (!SUBJECT_TOKEN.test(token)) {
      throw new ValidationError(
        field,
        `${field} ${describeValue(subject)} is not a valid NATS publish subject: use dot-separated tokens with no spaces, no empty tokens and no wildcards (* or >), e.g. "orders.placed"`,
      );
    }
  }
  const reserved = reservedSubjectToken(subject);
  if (reserved !== undefined) throw new ReservedSubjectError(field, subject, reservedSubjectMessage(subject, field));
  return subject;
}

function validateText(value: unknown, field: string, max: number, example: string): string {
  if (typeof value !== 'string' || value.length === 0) {
    throw new ValidationError(field, `${field} must be a non-empty string, got ${describeValue(value)}; e.g. ${example}`);
  }
  if (value.length > max) {
    throw new ValidationError(field, `${field} ${describeValue(value)} is ${value.length} characters; the limit is ${max}`);
  }
  // Control characters cannot travel in a NATS header (CR/LF would split it).
  if (CONTROL_CHARACTER.test(value)) {
    throw new ValidationError(field, `${field} ${describeValue(value)} contains a control character; remove it`);
  }
  refuseLoneSurrogate(value, field, field);
  // NATS (like HTTP) trims header values, so edge whitespace would not survive the trip.
  if (value.trim() !== value) {
    throw new ValidationError(
      field,
      `${field} ${describeValue(value)} starts or ends with whitespace, which headers do not carry; trim it`,
    );
  }
  return value;
}

export const validateKey = (key: unknown, field = 'key'): string => validateText(key, field, LIMITS.keyMaxLength, '"order-42"');
export const validateType = (type: unknown, field = 'type'): string => validateText(type, field, LIMITS.typeMaxLength, '"OrderPlaced"');
export const validateSource = (source: unknown, field = 'source'): string =>
  validateText(source, field, LIMITS.sourceMaxLength, '"orders-service"');

/** A control character: none may travel in a NATS header (CR/LF would split it). */
// biome-ignore lint/suspicious/noControlCharactersInRegex: we are rejecting control characters
export const CONTROL_CHARACTER = /[\u0000-\u001f\u007f]/;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** A UUID in its text form (any version, either case): an event id, a pg-boss job id. */
export function isUuid(value: unknown): value is string {
  return typeof value === 'string' && UUID.test(value);
}

// NATS stream and consumer names: no whitespace, `.`, `*`, `>`, path separators.
const NATS_NAME = /^[^\s.*>/\\]{1,255}$/;
/** A JetStream stream or consumer name: 1-255 characters, no whitespace, `.`, `*`, `>`, `/` or a backslash. */
export function isNatsName(value: unknown): value is string {
  return typeof value === 'string' && NATS_NAME.test(value);
}

export function validateEventId(id: unknown, field = 'id'): string {
  if (!isUuid(id)) {
    throw new ValidationError(field, `${field} must be a UUID such as "0190f2c4-6f2e-7c3a-9a47-1b2c3d4e5f60", got ${describeValue(id)}`);
  }
  return id.toLowerCase();
}

/**
 * The largest version a caller may give: 2^62. A key's recorded version is a bigint (at most 2^63-1),
 * and the next publish without a version adds one to it, so a given version of 2^63-1 made every
 * later publish of the key fail with "bigint out of range". Below 2^62, a key keeps 2^62 generated
 * versions after its largest given one. The publish functions enforce the same bound (outbox
 * migration 000009) for callers that bypass this package.
 */
export const MAX_EVENT_VERSION = 4_611_686_018_427_387_904n;

/** A version a caller gives: a positive integer of at most MAX_EVENT_VERSION (2^62). */
export function validateVersion(version: unknown, field = 'version'): bigint {
  let v: bigint | undefined;
  if (typeof version === 'bigint') v = version;
  else if (typeof version === 'number' && Number.isSafeInteger(version)) v = BigInt(version);
  if (v === undefined || v < 1n || v > MAX_EVENT_VERSION) {
    throw new ValidationError(
      field,
      `${field} must be a positive integer (number or bigint) of at most 2^62 (${MAX_EVENT_VERSION}), got ${describeValue(version)}`,
    );
  }
  return v;
}

/** Header names the codec owns; a caller may not set them. Compared case-insensitively. */
const RESERVED_HEADER = /^(ce-|nats-)|^content-type$/i;
/** `ce-*`, `Nats-*` or `Content-Type`, in any case: a header only the codec writes, from the event's own fields. */
export function isReservedHeader(name: string): boolean {
  return RESERVED_HEADER.test(name);
}
/** Passed through as given: W3C trace context. */
export const TRACE_HEADERS = ['traceparent', 'tracestate'] as const;
const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

export function validateHeaders(headers: unknown, field = 'headers'): Record<string, string> {
  if (headers === undefined || headers === null) return {};
  if (typeof headers !== 'object' || Array.isArray(headers)) {
    throw new ValidationError(field, `${field} must be an object of string values, got ${describeValue(headers)}`);
  }
  const entries = Object.entries(headers as Record<string, unknown>);
  if (entries.length > LIMITS.headerCountMax) {
    throw new ValidationError(field, `${field} has ${entries.length} entries; the limit is ${LIMITS.headerCountMax}`);
  }
  // Built with fromEntries: a header named `__proto__` stays an own entry.
  const out = new Map<string, string>();
  const seen = new Set<string>();
  for (const [name, value] of entries) {
    if (!HEADER_NAME.test(name) || name.length > LIMITS.headerNameMaxLength) {
      throw new ValidationError(
        `${field}.${name}`,
        `header name ${describeValue(name)} is not a valid header token (letters, digits and !#$%&'*+-.^_\`|~, at most ${LIMITS.headerNameMaxLength} characters)`,
      );
    }
    if (RESERVED_HEADER.test(name)) {
      throw new ValidationError(
        `${field}.${name}`,
        `header ${describeValue(name)} is reserved: Ferry sets ce-*, Nats-* and Content-Type itself; pass the value as an event field or rename the header`,
      );
    }
    const lower = name.toLowerCase();
    if (seen.has(lower)) {
      throw new ValidationError(`${field}.${name}`, `header ${describeValue(name)} is given twice (names are case-insensitive)`);
    }
    seen.add(lower);
    if (typeof value !== 'string') {
      throw new ValidationError(`${field}.${name}`, `header ${describeValue(name)} must be a string, got ${describeValue(value)}`);
    }
    if (value.length > LIMITS.headerValueMaxLength) {
      throw new ValidationError(
        `${field}.${name}`,
        `header ${describeValue(name)} is ${value.length} characters; the limit is ${LIMITS.headerValueMaxLength}`,
      );
    }
    // biome-ignore lint/suspicious/noControlCharactersInRegex: we are rejecting control characters
    if (/[\u0000-\u0008\u000a-\u001f\u007f]/.test(value)) {
      throw new ValidationError(`${field}.${name}`, `header ${describeValue(name)} has a control character in its value; remove it`);
    }
    refuseLoneSurrogate(value, `${field}.${name}`, `header ${describeValue(name)} value`);
    if (value.trim() !== value) {
      throw new ValidationError(
        `${field}.${name}`,
        `header ${describeValue(name)} value starts or ends with whitespace, which NATS trims; trim it`,
      );
    }
    out.set(name, value);
  }
  return Object.fromEntries(out);
}
