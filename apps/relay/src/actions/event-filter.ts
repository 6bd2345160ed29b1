import { describeValue, ValidationError, validateEventId } from '@ferry/core';

/** An outbox row's state, as the console and `ferry dlq show` name it. */
export const EVENT_STATES = ['pending', 'backing-off', 'dead', 'published', 'discarded'] as const;
export type EventState = (typeof EVENT_STATES)[number];

/**
 * A selection of outbox rows: what the console's event search filters by,
 * and what a dlq action acts on (narrowed to failed rows, `FAILED_CONDITION`).
 * Every field narrows; an empty filter is every row.
 */
export interface EventFilter {
  ids?: string[];
  key?: string;
  /** The subject, or a prefix of it ending in `.` or `>` (`orders.` or `orders.>`). */
  subject?: string;
  type?: string;
  /** created_at at or after. */
  since?: Date;
  /** created_at before. */
  until?: Date;
  state?: EventState;
  /** The failure reason: last_error's first REASON_CHARS characters, exactly (a group of the blocked keys page). */
  reason?: string;
}

/** The columns that name an outbox row in every listing (the dlq's, the console's), the numbers as text. */
export interface OutboxRowHead {
  seq: string;
  id: string;
  key: string;
  version: string;
  subject: string;
  type: string;
}

/** How much of last_error names a failure group. */
export const REASON_CHARS = 200;

/**
 * The SQL condition of each state, on the outbox aliased `o` with its delivery state `p` (pending)
 * and `d` (published or discarded) joined (`outboxWithState`, outbox migration 000015).
 */
export function stateCondition(state: EventState): string {
  switch (state) {
    case 'pending':
      return 'p.attempts = 0 AND p.dead_at IS NULL';
    case 'backing-off':
      return 'p.attempts > 0 AND p.dead_at IS NULL';
    case 'dead':
      // attempts > 0 holds for every dead row (the relay counts the failure that killed it) and lets the
      // planner use outbox_pending_failed_idx, the small index of failed rows, instead of the whole table.
      return 'p.attempts > 0 AND p.dead_at IS NOT NULL';
    case 'published':
      return 'd.seq IS NOT NULL AND d.dead_at IS NULL';
    case 'discarded':
      return 'd.dead_at IS NOT NULL';
  }
}

/**
 * The rows a dlq action may change: failed and not given up on, dead or
 * backing off. A relay counts every failed attempt, so `attempts > 0` is
 * exactly "failed at least once", and it lets the planner use
 * outbox_pending_failed_idx, the small index of failed rows.
 */
export const FAILED_CONDITION = 'p.attempts > 0';

/** The SQL expression naming a row's state. */
export const STATE_SQL = `CASE WHEN d.seq IS NOT NULL THEN CASE WHEN d.dead_at IS NULL THEN 'published' ELSE 'discarded' END
  WHEN p.dead_at IS NOT NULL THEN 'dead' WHEN p.attempts > 0 THEN 'backing-off' ELSE 'pending' END`;

const LIKE_SPECIAL = /[\\%_]/g;

/**
 * The WHERE condition and its parameters (numbered from `first`). Ids use the
 * unique id index, a key the unique (key, version) index; the rest narrow a
 * walk that the caller bounds with a LIMIT and the statement timeout.
 */
export function filterCondition(f: EventFilter, first = 1): { sql: string; params: unknown[] } {
  const parts: string[] = [];
  const params: unknown[] = [];
  const p = (v: unknown) => {
    params.push(v);
    return `$${first + params.length - 1}`;
  };
  if (f.ids !== undefined) parts.push(`o.id = ANY (${p(f.ids)}::uuid[])`);
  if (f.key !== undefined) parts.push(`o.key = ${p(f.key)}`);
  if (f.subject !== undefined) {
    if (/[.>]$/.test(f.subject)) {
      const prefix = f.subject.replace(/>$/, '');
      parts.push(`o.subject LIKE ${p(`${prefix.replace(LIKE_SPECIAL, '\\$&')}%`)}`);
    } else parts.push(`o.subject = ${p(f.subject)}`);
  }
  if (f.type !== undefined) parts.push(`o.type = ${p(f.type)}`);
  if (f.since !== undefined) parts.push(`o.created_at >= ${p(f.since)}`);
  if (f.until !== undefined) parts.push(`o.created_at < ${p(f.until)}`);
  if (f.state !== undefined) parts.push(stateCondition(f.state));
  if (f.reason !== undefined) parts.push(`left(coalesce(p.last_error, d.last_error), ${REASON_CHARS}) = ${p(f.reason)}`);
  return { sql: parts.length ? parts.join(' AND ') : 'true', params };
}

/** The filter as the audit trail records it (dates as ISO strings, nothing undefined). */
export function describeFilter(f: EventFilter): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(f)) if (v !== undefined) out[k] = v instanceof Date ? v.toISOString() : v;
  return out;
}

const MAX_TEXT = 1000;

function text(field: string, v: unknown): string | undefined {
  if (v === undefined || v === null || v === '') return undefined;
  if (typeof v !== 'string' || v.length > MAX_TEXT)
    throw new ValidationError(field, `${field} must be text of at most ${MAX_TEXT} characters, got ${describeValue(v)}`);
  return v;
}

function time(field: string, v: unknown): Date | undefined {
  const s = text(field, v);
  if (s === undefined) return undefined;
  const d = new Date(s);
  if (Number.isNaN(d.getTime()))
    throw new ValidationError(field, `${field} must be a time such as 2026-11-01T00:00:00Z, got ${describeValue(s)}`);
  return d;
}

/** The filter's plain fields and how each is read, in the order they are checked (the first bad one is named). */
const FIELDS = [
  ['key', text],
  ['subject', text],
  ['type', text],
  ['since', time],
  ['until', time],
  ['reason', text],
] as const satisfies readonly (readonly [keyof EventFilter, (field: string, v: unknown) => unknown])[];

/** A filter from form or query fields (the console's); every bad field is a ValidationError naming it. */
export function parseFilter(fields: Record<string, unknown>): EventFilter {
  const f: EventFilter = {};
  const id = text('id', fields.id);
  if (id !== undefined) f.ids = [validateEventId(id.trim(), 'id')];
  for (const [name, parse] of FIELDS) {
    const v = parse(name, fields[name]);
    if (v !== undefined) Object.assign(f, { [name]: v });
  }
  const state = text('state', fields.state);
  if (state !== undefined) {
    if (!(EVENT_STATES as readonly string[]).includes(state))
      throw new ValidationError('state', `state must be one of ${EVENT_STATES.join(', ')}, got ${describeValue(state)}`);
    f.state = state as EventState;
  }
  return f;
}
