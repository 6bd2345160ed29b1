import { encodedSize, encodeEvent, eventFromOutboxRow, type Queryable, quoteIdentifier, reservedSubjectToken } from '@ferry/core';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { count } from '../count.js';
import { type BoundedOutboxEventRow, boundedOutboxEventColumns } from '../sql/outbox-event-columns.js';
import { outboxWithState } from '../sql/outbox-state.js';
import type { EventFilter } from './event-filter.js';
import { failedSelection } from './failed.js';
import { bindSubjectFix, streamsBinding } from './subject-streams.js';

// What a dlq retry would run into again, for `ferry dlq retry --dry-run` and the console's retry
// preview alike (one function, so the two cannot disagree): a subject no stream binds, a subject
// NATS reserves, an event over the server's max_payload. Each would fail the same way after the
// retry, and the preview says so with the fix, before anything changes.

/** A subject of the selection, and whether a stream binds it now. */
export interface SubjectCheck {
  subject: string;
  events: number;
  /** The stream that binds it, or null: the retried events would fail again (no_responders). */
  stream: string | null;
  fix?: string;
}

/** One way the retried events would fail again, in words, with how many and the fix. */
export interface RetryHazard {
  kind: 'unbound-subject' | 'reserved-subject' | 'over-max-payload';
  events: number;
  /** The subjects it is about (none for an event over max_payload). */
  subjects: string[];
  message: string;
  fix: string;
}

export interface RetryHazards {
  /** Each selected subject and the stream binding it; null when NATS was not asked. */
  subjects: SubjectCheck[] | null;
  /** The server's max_payload the sizes were compared with; undefined when NATS was not asked. */
  maxPayload: number | undefined;
  /** Selected events that encode to more than maxPayload: the first few ids and their sizes. */
  oversize: Array<{ id: string; bytes: number }>;
  hazards: RetryHazard[];
  /** Events that would fail again, over all hazards (an event may be counted under two). */
  wouldFailAgain: number;
}

/** Subjects read per check: a selection of more distinct subjects than this is checked on its largest ones. */
const SUBJECTS_CHECKED = 1_000;
/** Oversize ids listed by name. */
const OVERSIZE_LISTED = 10;
/** Rows near max_payload encoded exactly per check (each loads its data). */
const ENCODED_AT_MOST = 20;
/**
 * The encoded size of an event is at most its stored bytes plus this much per event: the
 * header names and the framing (core's codec.ts: encodedSizeAtMost). Rows over max_payload
 * less this are encoded exactly; the rest cannot be over.
 */
const FRAMING_MARGIN = 1_024;

/**
 * The hazards a retry of the failed events `filter` selects would meet. With `nc`, asks the
 * server which stream binds each subject and compares each event's encoded size with its
 * max_payload; without, checks only what PostgreSQL alone can tell (reserved subjects).
 */
export async function retryHazards(q: Queryable, schema: string, filter: EventFilter, nc?: NatsConnection): Promise<RetryHazards> {
  const s = quoteIdentifier(schema);
  const { sql, params } = failedSelection(filter);
  const { rows: bySubject } = await q.query<{ subject: string; n: string }>(
    `SELECT o.subject, count(*)::text AS n FROM ${outboxWithState(s)} WHERE ${sql}
      GROUP BY o.subject ORDER BY count(*) DESC, o.subject LIMIT ${SUBJECTS_CHECKED}`,
    params,
  );
  const hazards: RetryHazard[] = [];
  const reserved = bySubject.filter((r) => reservedSubjectToken(r.subject) !== undefined);
  if (reserved.length > 0) {
    const n = reserved.reduce((sum, r) => sum + Number(r.n), 0);
    hazards.push({
      kind: 'reserved-subject',
      events: n,
      subjects: reserved.map((r) => r.subject),
      message: `${count(n, 'event')} on subjects NATS reserves (${reserved.map((r) => r.subject).join(', ')}): the relay never sends them; a retry only makes them dead again (reserved_subject)`,
      fix: 'discard them (ferry dlq discard) and find who stored them: the publish functions refuse such subjects since outbox migration 000016',
    });
  }
  if (!nc) return { subjects: null, maxPayload: undefined, oversize: [], hazards, wouldFailAgain: sumOf(hazards) };

  const asked = bySubject.filter((r) => reservedSubjectToken(r.subject) === undefined);
  const bound = await streamsBinding(
    await jetstreamManager(nc),
    asked.map((r) => r.subject),
  );
  const subjects = asked.map(({ subject, n }): SubjectCheck => {
    const stream = bound.get(subject) ?? null;
    return stream === null ? { subject, events: Number(n), stream, fix: bindSubjectFix(subject) } : { subject, events: Number(n), stream };
  });
  for (const x of subjects) {
    if (x.stream !== null) continue;
    hazards.push({
      kind: 'unbound-subject',
      events: x.events,
      subjects: [x.subject],
      message: `no stream binds subject ${x.subject} (${count(x.events, 'event')} would fail again)`,
      fix: x.fix as string,
    });
  }

  const maxPayload = nc.info?.max_payload;
  const oversize: Array<{ id: string; bytes: number }> = [];
  if (maxPayload !== undefined) {
    const over = await oversizeEvents(q, s, sql, params, maxPayload, oversize);
    if (over > 0) {
      hazards.push({
        kind: 'over-max-payload',
        events: over,
        subjects: [],
        message: `${count(over, 'event')} encode${over === 1 ? 's' : ''} to more than the server's max_payload ${maxPayload} bytes (${oversize.map((x) => `${x.id}: ${x.bytes}`).join(', ')}${over > oversize.length ? ', …' : ''}): the server refuses ${over === 1 ? 'it' : 'them'} again`,
        fix: 'raise max_payload in the nats-server config (then retry), or discard them (ferry dlq discard); a payload this size belongs in an object store, with a reference in the event',
      });
    }
  }
  return { subjects, maxPayload, oversize, hazards, wouldFailAgain: sumOf(hazards) };
}

/**
 * How many selected events encode to more than `maxPayload`, listing the first in `listed`. Data
 * over it is counted in PostgreSQL; a row within FRAMING_MARGIN under it is encoded here (its data
 * loaded, at most max_payload each), the first ENCODED_AT_MOST of them.
 */
async function oversizeEvents(
  q: Queryable,
  s: string,
  sql: string,
  params: unknown[],
  maxPayload: number,
  listed: Array<{ id: string; bytes: number }>,
): Promise<number> {
  const n = params.length;
  const stored = `octet_length(o.data) + octet_length(o.key) + octet_length(o.subject) + octet_length(o.type) + octet_length(o.source) + coalesce(octet_length(o.headers::text), 0)`;
  const { rows: big } = await q.query<{ id: string; bytes: number; total: string }>(
    `SELECT o.id::text AS id, octet_length(o.data) AS bytes, count(*) OVER ()::text AS total FROM ${outboxWithState(s)}
      WHERE ${sql} AND octet_length(o.data) > $${n + 1} ORDER BY o.seq LIMIT ${OVERSIZE_LISTED}`,
    [...params, maxPayload],
  );
  let over = Number(big[0]?.total ?? 0);
  listed.push(...big.map((r) => ({ id: r.id, bytes: r.bytes })));
  const { rows: near } = await q.query<BoundedOutboxEventRow>(
    `SELECT ${boundedOutboxEventColumns(`$${n + 1}`)} FROM ${outboxWithState(s)}
      WHERE ${sql} AND octet_length(o.data) <= $${n + 1} AND ${stored} > $${n + 2} ORDER BY o.seq LIMIT ${ENCODED_AT_MOST}`,
    [...params, maxPayload, Math.max(0, maxPayload - FRAMING_MARGIN)],
  );
  for (const row of near) {
    const bytes = encodedSize(encodeEvent(eventFromOutboxRow({ ...row, data: row.data ?? new Uint8Array(0) })));
    if (bytes <= maxPayload) continue;
    over++;
    if (listed.length < OVERSIZE_LISTED) listed.push({ id: row.id, bytes });
  }
  return over;
}

function sumOf(hazards: readonly RetryHazard[]): number {
  return hazards.reduce((sum, h) => sum + h.events, 0);
}
