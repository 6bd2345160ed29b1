import { notifyChannel, type Queryable, quoteIdentifier, withTransaction } from '@ferry/core';
import type pg from 'pg';
import { NOTIFY_RELAYS_SQL } from '../sql/notify-relays.js';
import { outboxWithState, waitingBehind } from '../sql/outbox-state.js';
import { type AuditEntry, auditTableMissing, isAuditMissing, type Operator, recordAction } from './audit.js';
import { describeFilter, type EventFilter, FAILED_CONDITION, filterCondition } from './event-filter.js';
import { auditSelection, type ExpectedSelection, type Selection, SelectionChangedError, sameSelection, selectionOf } from './selection.js';

export { SelectionChangedError } from './selection.js';

// One implementation of `dlq retry` and `dlq discard`, for `ferry dlq` and `ferry console` alike:
// a preview (how many rows, of how many keys, how many rows behind them will flow), then the change,
// recorded in operator_actions in the same transaction. Both act on failed rows: dead ones, and ones
// the relay is backing off from (an operator who knows a subject will never be bound need not wait
// ~22 minutes for the head to die).

export type FailedAction = 'retry' | 'discard';

/** The states a dlq action acts on. */
export type FailedState = 'dead' | 'backing-off';

/** What a dlq action would change, and what it frees. */
export interface FailedPreview {
  /** Failed rows selected (dead + backingOff). */
  rows: number;
  dead: number;
  backingOff: number;
  keys: number;
  /** The highest seq selected (a confirmation is held to `selection`, the exact rows, not to this bound). */
  maxSeq: string | null;
  /** Undelivered rows of those keys behind them: they flow once the keys unblock. Counted behind `behindKeys` keys only. */
  behind: number;
  /** The keys `behind` was counted behind: all of them (`keys`), or the first BEHIND_KEYS_COUNTED, so `behind` is a lower bound. */
  behindKeys: number;
  /** Every selected row's id in seq order, as a digest: what a confirmation carries (`SettleFailedOptions.expect`). */
  selection: Selection;
  /** The first selected rows, oldest first. */
  sample: Array<{ id: string; key: string; version: string; subject: string; type: string; state: FailedState; last_error: string | null }>;
}

/** The filter's condition narrowed to failed rows: a dlq action never touches any other. */
export function failedSelection(filter: EventFilter): { sql: string; params: unknown[] } {
  const { sql, params } = filterCondition(filter);
  return { sql: `${sql} AND ${FAILED_CONDITION}`, params };
}

const STATE = `CASE WHEN p.dead_at IS NULL THEN 'backing-off' ELSE 'dead' END`;

/**
 * Past this many keys, the rows behind them are counted behind the first this
 * many only, the oldest heads (`behindKeys` says how many): one index probe per key, and with
 * 100,000 blocked keys the whole count took a second, for a figure that only
 * says "a lot will flow". The rows and keys selected are always exact.
 */
export const BEHIND_KEYS_COUNTED = 10_000;

export async function previewFailed(
  q: Queryable,
  schema: string,
  filter: EventFilter,
  sample = 20,
  countBehindKeys = BEHIND_KEYS_COUNTED,
): Promise<FailedPreview> {
  const s = quoteIdentifier(schema);
  const { sql, params } = failedSelection(filter);
  // The rows behind a head: its key's pending rows after it (the pending index alone), less the dead
  // ones among them (the failed index alone, which carries dead_at): a dead_at filter on the pending
  // rows read each one's tuple, 0.65-0.94 s for a key with a million rows behind its dead head.
  // One pass over outbox_pending_failed_idx in (key, seq) order, which carries lane and dead_at (000015): each
  // selected key's head, rows and dead rows, without reading the table unless the filter needs a column
  // the index lacks. A key always has one lane (a generated column of the key).
  const { rows } = await q.query<{ n: string; dead: string; keys: string; maxseq: string | null; behind: string; counted: string }>(
    `WITH k AS MATERIALIZED (
       SELECT p.key, min(p.lane) AS lane, min(p.seq) AS seq, max(p.seq) AS maxseq, count(*) AS n,
              count(*) FILTER (WHERE p.dead_at IS NOT NULL) AS dead
         FROM ${outboxWithState(s)} WHERE ${sql} GROUP BY p.key),
          counted AS (SELECT lane, key, seq FROM k ORDER BY seq LIMIT ${Math.max(0, Math.trunc(countBehindKeys))})
     SELECT coalesce(sum(n), 0)::text AS n, coalesce(sum(dead), 0)::text AS dead, count(*)::text AS keys, max(maxseq)::text AS maxseq,
            (SELECT coalesce(sum(${waitingBehind(s, 'h')}
                                 - (SELECT count(*) FROM ${s}.outbox_pending f
                                   WHERE f.key = h.key AND f.attempts > 0 AND f.dead_at IS NOT NULL AND f.seq > h.seq)), 0) FROM counted h)::text AS behind,
            (SELECT count(*) FROM counted)::text AS counted
       FROM k`,
    params,
  );
  const first = await q.query<FailedPreview['sample'][number]>(
    `SELECT o.id::text AS id, o.key, o.version::text AS version, o.subject, o.type, ${STATE} AS state, p.last_error FROM ${outboxWithState(s)}
      WHERE ${sql} ORDER BY o.seq LIMIT ${Math.max(0, Math.trunc(sample))}`,
    params,
  );
  // Read apart from the counts: a row that changed between the two reads makes the confirmation
  // refuse, which is the safe side.
  const selection = selectionOf((await selectFailedIds(q, schema, filter)).map((x) => x.id));
  const r = rows[0];
  const n = Number(r?.n ?? 0);
  const dead = Number(r?.dead ?? 0);
  return {
    rows: n,
    dead,
    backingOff: n - dead,
    keys: Number(r?.keys ?? 0),
    maxSeq: r?.maxseq ?? null,
    behind: Number(r?.behind ?? 0),
    behindKeys: Number(r?.counted ?? 0),
    selection,
    sample: first.rows,
  };
}

/** One selected failed row. */
export interface FailedRow {
  id: string;
  key: string;
  subject: string;
  state: FailedState;
}

/** Every failed row the filter selects, in seq order (`ferry dlq … --dry-run`, and which given ids are failed). */
export async function selectFailed(q: Queryable, schema: string, filter: EventFilter): Promise<FailedRow[]> {
  const { sql, params } = failedSelection(filter);
  const { rows } = await q.query<FailedRow>(
    `SELECT o.id::text AS id, o.key, o.subject, ${STATE} AS state FROM ${outboxWithState(quoteIdentifier(schema))} WHERE ${sql} ORDER BY o.seq`,
    params,
  );
  return rows;
}

/** Every failed row's id the filter selects, in seq order (the digest's input). */
async function selectFailedIds(q: Queryable, schema: string, filter: EventFilter): Promise<Array<{ id: string }>> {
  const { sql, params } = failedSelection(filter);
  const { rows } = await q.query<{ id: string }>(
    `SELECT o.id::text AS id FROM ${outboxWithState(quoteIdentifier(schema))} WHERE ${sql} ORDER BY o.seq`,
    params,
  );
  return rows;
}

export interface SettleFailedOptions extends Operator {
  /**
   * The selection of the preview the operator confirmed: refuse, and change nothing, unless the
   * rows selected now, locked, are exactly these ids in this order.
   */
  expect?: ExpectedSelection;
}

/**
 * `retry` clears dead_at and attempts and sets next_attempt_at to
 * '-infinity', so the row is due at once, dead or backing off. `discard`
 * keeps the row for audit but ends its pending state: it is recorded as
 * published and dead (outbox_published: dead_at kept or set now,
 * last_error prefixed with "discarded by …"), so its key's later rows flow. The relays are woken by a NOTIFY; the
 * action is recorded in operator_actions in the same transaction. Returns
 * the ids changed, in seq order.
 *
 * A backing-off row may be in a relay's hands right now (claimed when it
 * came due). The relay's marks keep the operator's word: its failure record
 * is fenced on the attempts it claimed the row with (mark-failed.ts), so a
 * retry is not undone, and on its pending row, so a discard is not; a
 * discarded row is never claimed again. The relay sends a key's next row
 * only after the previous one's PubAck, so a row discarded while on the
 * wire either lands before the key's later rows or not at all (its state
 * says discarded either way): per-key order holds.
 */
export async function settleFailed(
  pool: pg.Pool,
  schema: string,
  action: FailedAction,
  filter: EventFilter,
  options: SettleFailedOptions,
): Promise<string[]> {
  const s = quoteIdentifier(schema);
  const { sql, params } = failedSelection(filter);
  const by = options.via === 'cli' ? 'ferry dlq discard' : `ferry console (${options.actor.slice(0, 100)})`;
  const state = `${s}.outbox o LEFT JOIN ${s}.outbox_published d ON d.seq = o.seq`;
  // The selection, locked: the pending rows the filter selects now, in seq order. Locking re-checks
  // the filter on a row another transaction changed meanwhile (a row retried and delivered, or
  // retried by another operator, while this waited no longer matches); the change below is then
  // bounded by exactly these rows, so a row that fails after this read (C) is never swept in, and
  // the confirmation's check and the change see the same rows.
  const lock = `SELECT p.seq::text AS seq, o.id::text AS id FROM ${s}.outbox_pending p JOIN ${state} ON o.seq = p.seq
     WHERE ${sql} ORDER BY o.seq FOR UPDATE OF p`;
  const values = [...params];
  values.push(null); // the locked seqs, set in the transaction
  const locked = `p.seq = ANY ($${values.length}::bigint[])`;
  const where = `${sql} AND ${locked}`;
  // The change on the locked rows: a retry makes them due at once; a discard deletes them and
  // records each as published and dead (outbox migration 000015).
  let change: string;
  if (action === 'retry') {
    change = `WITH done AS (UPDATE ${s}.outbox_pending p SET dead_at = NULL, attempts = 0, next_attempt_at = '-infinity'
                    FROM ${state} WHERE o.seq = p.seq AND ${where} RETURNING p.seq, o.id)
    SELECT id::text AS id FROM done ORDER BY seq`;
  } else {
    values.push(`discarded by ${by} at `);
    change = `WITH gone AS (DELETE FROM ${s}.outbox_pending p USING ${state} WHERE o.seq = p.seq AND ${where}
                  RETURNING p.seq, o.id, p.attempts, p.last_error, p.dead_at),
         done AS (INSERT INTO ${s}.outbox_published (seq, attempts, last_error, dead_at)
                  SELECT g.seq, g.attempts, $${values.length}::text || now()::text || coalesce(': ' || g.last_error, ''), coalesce(g.dead_at, now())
                    FROM gone g RETURNING seq)
    SELECT g.id::text AS id FROM gone g JOIN done USING (seq) ORDER BY g.seq`;
  }
  const entry = (ids: readonly string[], outcome: string): AuditEntry => ({
    actor: options.actor,
    via: options.via,
    action: action === 'retry' ? 'dlq.retry' : 'dlq.discard',
    filter: {
      // The state acted on: the filter's own (dead, backing-off), or every failed one.
      state: 'failed',
      ...describeFilter(filter),
      ...(options.expect ? { previewed: options.expect.rows ?? null, previewDigest: options.expect.digest } : {}),
      changed: auditSelection(ids),
    },
    rows: ids.length,
    outcome,
  });
  try {
    return await withTransaction(pool, async (tx) => {
      const selected = await tx.query<{ seq: string; id: string }>(lock, params);
      if (options.expect && !sameSelection(options.expect, selectionOf(selected.rows.map((r) => r.id))))
        throw new SelectionChangedError(options.expect.rows, selected.rows.length);
      values[params.length] = selected.rows.map((r) => r.seq);
      const { rows } = await tx.query<{ id: string }>(change, values);
      const ids = rows.map((r) => r.id);
      await recordAction(tx, s, entry(ids, 'ok'));
      if (rows.length > 0) await tx.query(NOTIFY_RELAYS_SQL, [notifyChannel(schema), 'dlq']);
      return ids;
    });
  } catch (err) {
    if (isAuditMissing(err)) throw auditTableMissing(schema, err);
    if (err instanceof SelectionChangedError) {
      // Recorded apart: the change rolled back, the refusal is part of the trail.
      await recordAction(pool, s, entry([], err.message)).catch(() => {});
    }
    throw err;
  }
}
