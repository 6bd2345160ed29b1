import { decodeMessage, type FerryEvent, isUuid, LIMITS } from '@ferry/core';
import { PoisonMessageError } from './errors.js';
import { INBOX_MODES, type InboxMode, PARK_REASONS, type ParkReason } from './types.js';

/**
 * A parked event as it sits in the consumer's pg-boss queue: the message
 * exactly as it came off the stream (headers + body), so a retry decodes it
 * through the same codec, plus why it was parked.
 */
export interface ParkedJobData {
  readonly format: 1;
  readonly consumer: string;
  readonly mode: InboxMode;
  readonly stream: string;
  readonly streamSeq: number | null;
  readonly natsSubject: string;
  readonly headers: ReadonlyArray<readonly [string, string]>;
  /** The body, base64. */
  readonly body: string;
  readonly reason: ParkReason;
  readonly error: string;
  readonly parkedAt: string;
  readonly deliveries: number;
  /** Decoded fields, when the headers decoded. */
  readonly id?: string;
  readonly key?: string;
  readonly version?: string;
  readonly type?: string;
}

/**
 * Every parked job's heartbeat: a park worker that dies (SIGKILL, lost host)
 * while it runs a job stops touching it, and pg-boss's supervisor puts the job
 * back within about this long plus its supervise interval, instead of holding
 * the key until the job expires (15 minutes). The minimum pg-boss takes.
 */
export const PARK_HEARTBEAT_SECONDS = 10;

/** The pg-boss singletonKey: the event key, or a key of its own for a message with none (it blocks nothing). */
export function parkKey(key: string | undefined, stream: string, streamSeq: number | null): string {
  return key ?? `~nokey/${stream}/${streamSeq ?? 'unknown'}/${Date.now()}`;
}

/**
 * The event a parked job holds, for a retry, decoded by the stream path's own decoder
 * (`decodeMessage`) from the headers as they came: a message the stream refused is refused
 * again, never applied. A job that is not a parked event, or whose message does not decode, is a
 * PoisonMessageError (the retry fails, the job stays shown).
 */
export function decodeParked(data: unknown): FerryEvent {
  const read = readParkedJob(data);
  if (read.kind === 'malformed') throw new PoisonMessageError('undecodable-headers', `not a Ferry parked event: ${read.problem}`);
  const job = read.job;
  try {
    return decodeMessage(job.headers, Buffer.from(job.body, 'base64'), job.natsSubject);
  } catch (err) {
    throw new PoisonMessageError('undecodable-headers', (err as Error)?.message ?? String(err), { cause: err });
  }
}

/**
 * A parked job as read back from the parking lot: a Ferry parked event, or a job that is not one.
 * The parking lot is a pg-boss table that other roles may write (a shared pg-boss schema: see
 * docs/security.md), so what comes back is untrusted input, never assumed to be what `park` wrote.
 */
export type ParkedJobRead =
  | { readonly kind: 'parked'; readonly job: ParkedJobData }
  | {
      readonly kind: 'malformed';
      /** What is wrong with it, naming the field. */
      readonly problem: string;
      /** The job's data as JSON, ASCII only (every other character `\uXXXX`), cut at RAW_JSON_MAX characters. */
      readonly raw: string;
    };

/** Characters of a malformed job's JSON kept for display. */
export const RAW_JSON_MAX = 4096;
/** Header pairs a parked message may carry: far above what NATS carries in practice, far below what would hurt a page. */
const HEADERS_MAX = 1024;
/** Characters of a header value, and of the error text read back (a handler's message may be longer: it is cut). */
const TEXT_MAX = 65_536;
/** The base64 characters of the largest body NATS carries (LIMITS.maxEventBytes). */
const BODY_MAX = Math.ceil(LIMITS.maxEventBytes / 3) * 4;
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
const VERSION = /^\d{1,19}$/;
/** The largest version a key can record (a PostgreSQL bigint): a larger one read from a job made a discard fail "bigint out of range". */
const MAX_VERSION = 2n ** 63n - 1n;
const CONSUMER = /^[a-z_][a-z0-9_]{0,62}$/;

/** The data as JSON a terminal or a page shows safely: ASCII only, bounded. Never throws. */
export function rawJson(data: unknown): string {
  let json: string;
  try {
    json = JSON.stringify(data) ?? String(data);
  } catch (err) {
    return `(not JSON: ${(err as Error)?.message ?? String(err)})`.slice(0, RAW_JSON_MAX);
  }
  const cut = json.length > RAW_JSON_MAX ? json.slice(0, RAW_JSON_MAX) : json;
  const ascii = cut.replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  return json.length > RAW_JSON_MAX ? `${ascii}… (${json.length} characters)` : ascii;
}

function own(o: object, name: string): unknown {
  return Object.hasOwn(o, name) ? (o as Record<string, unknown>)[name] : undefined;
}

const text = (v: unknown, max: number): v is string => typeof v === 'string' && v.length <= max;
const count = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/** Why `data` is not a parked event, or the fields it holds as a fresh ParkedJobData. */
function check(data: unknown): string | ParkedJobData {
  if (typeof data !== 'object' || data === null || Array.isArray(data)) return 'the job data is not an object';
  if (own(data, 'format') !== 1) return `format is ${rawJson(own(data, 'format')).slice(0, 40)}, not 1`;
  const consumer = own(data, 'consumer');
  if (typeof consumer !== 'string' || !CONSUMER.test(consumer)) return 'consumer is not a consumer name';
  const mode = own(data, 'mode');
  if (!(INBOX_MODES as readonly unknown[]).includes(mode)) return `mode is not one of ${INBOX_MODES.join(', ')}`;
  const stream = own(data, 'stream');
  if (!text(stream, 1024) || stream === '') return 'stream is not a stream name';
  const streamSeq = own(data, 'streamSeq');
  if (streamSeq !== null && !count(streamSeq)) return 'streamSeq is not a stream sequence';
  const natsSubject = own(data, 'natsSubject');
  if (!text(natsSubject, LIMITS.subjectMaxLength) || natsSubject === '') return 'natsSubject is not a subject';
  const headers = own(data, 'headers');
  if (!Array.isArray(headers)) return 'headers is not an array';
  if (headers.length > HEADERS_MAX) return `headers has ${headers.length} entries, over ${HEADERS_MAX}`;
  const pairs: Array<readonly [string, string]> = [];
  for (const [i, h] of headers.entries()) {
    if (!Array.isArray(h) || h.length !== 2 || !text(h[0], 1024) || !text(h[1], TEXT_MAX))
      return `headers[${i}] is not a [name, value] pair of strings`;
    pairs.push([h[0], h[1]]);
  }
  const body = own(data, 'body');
  if (!text(body, BODY_MAX))
    return typeof body === 'string' ? `body is ${body.length} characters, over ${BODY_MAX}` : 'body is not a string';
  if (body.length % 4 !== 0 || !BASE64.test(body)) return 'body is not base64';
  const reason = own(data, 'reason');
  if (!(PARK_REASONS as readonly unknown[]).includes(reason)) return 'reason is not a park reason';
  const error = own(data, 'error');
  if (typeof error !== 'string') return 'error is not a string';
  const parkedAt = own(data, 'parkedAt');
  if (!text(parkedAt, 64) || Number.isNaN(Date.parse(parkedAt))) return 'parkedAt is not a time';
  const deliveries = own(data, 'deliveries');
  if (!count(deliveries)) return 'deliveries is not a count';
  const id = own(data, 'id');
  if (id !== undefined && !isUuid(id)) return 'id is not an event id';
  const key = own(data, 'key');
  if (key !== undefined && (!text(key, LIMITS.keyMaxLength) || key === '')) return 'key is not an event key';
  const version = own(data, 'version');
  if (version !== undefined && (typeof version !== 'string' || !VERSION.test(version) || BigInt(version) > MAX_VERSION))
    return 'version is not a version';
  const type = own(data, 'type');
  if (type !== undefined && (!text(type, LIMITS.typeMaxLength) || type === '')) return 'type is not an event type';
  return {
    format: 1,
    consumer,
    mode: mode as InboxMode,
    stream,
    streamSeq: streamSeq as number | null,
    natsSubject,
    headers: pairs,
    body,
    reason: reason as ParkReason,
    // Any handler's message is kept, however long; what is read back for display is bounded.
    error: error.length > TEXT_MAX ? `${error.slice(0, TEXT_MAX)}… (${error.length} characters)` : error,
    parkedAt,
    deliveries,
    ...(id !== undefined ? { id: id as string } : {}),
    ...(key !== undefined ? { key } : {}),
    ...(version !== undefined ? { version } : {}),
    ...(type !== undefined ? { type } : {}),
  };
}

/**
 * The one decoder of a parked job's payload, for the park worker, `ferry inbox parked` and the
 * console alike. Total: it never throws, whatever the job holds (a null header, a number where a
 * string goes, a `__proto__` key, a string of megabytes); a job that is not a parked event comes
 * back `malformed`, with why and its JSON, so the one job is shown and can be discarded while
 * every other row stays usable. Only own fields are read, and the job returned is a fresh object
 * of exactly the known fields.
 */
export function readParkedJob(data: unknown): ParkedJobRead {
  try {
    const r = check(data);
    return typeof r === 'string' ? { kind: 'malformed', problem: r, raw: rawJson(data) } : { kind: 'parked', job: r };
  } catch (err) {
    // A getter or proxy cannot reach here from JSON; kept total all the same.
    return { kind: 'malformed', problem: `unreadable: ${(err as Error)?.message ?? String(err)}`.slice(0, 200), raw: rawJson(data) };
  }
}

/** Whether a job's data is a well-formed parked event (`readParkedJob` says why not). */
export function isParkedJobData(data: unknown): data is ParkedJobData {
  return readParkedJob(data).kind === 'parked';
}
