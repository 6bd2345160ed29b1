import { notifyChannel, type Queryable, quoteIdentifier, withTransaction } from '@ferry/core';
import type pg from 'pg';
import { CommandFailedError } from '../errors.js';
import { NOTIFY_RELAYS_SQL } from '../sql/notify-relays.js';
import { type AuditEntry, auditTableMissing, isUndefinedTable, type Operator, recordAction } from './audit.js';
import { describeFilter, type EventFilter, filterCondition } from './event-filter.js';

// One implementation of `dlq retry` and `dlq discard`, for `ferry dlq` and `ferry console` alike:
// a preview (how many rows, of how many keys, how many rows behind them will flow), then the change,
// recorded in operator_actions in the same transaction.

export type DeadAction = 'retry' | 'discard';

/** What a dlq action would change, and what it frees. */
export interface DeadPreview {
  /** Dead rows selected. */
  rows: number;
  keys: number;
  /** The highest seq selected: the change is bounded by it, so rows dead after the preview are not swept in. */
  maxSeq: string | null;
  /** Undelivered rows of those keys behind them: they flow once the keys unblock. */
  behind: number;
  /** The first selected rows, oldest first. */
  sample: Array<{ id: string; key: string; version: string; subject: string; type: string; last_error: string | null }>;
}

/** The filter restricted to dead rows: a dlq action never touches any other. */
const deadOnly = (f: EventFilter): EventFilter => ({ ...f, state: 'dead' });

export async function previewDead(q: Queryable, schema: string, filter: EventFilter, sample = 20): Promise<DeadPreview> {
  const s = quoteIdentifier(schema);
  const { sql, params } = filterCondition(deadOnly(filter));
  const { rows } = await q.query<{ n: string; keys: string; maxseq: string | null; behind: string }>(
    `WITH sel AS MATERIALIZED (SELECT o.seq, o.lane, o.key FROM ${s}.outbox o WHERE ${sql}),
          heads AS (SELECT lane, key, min(seq) AS seq FROM sel GROUP BY lane, key)
     SELECT (SELECT count(*) FROM sel)::text AS n, (SELECT count(*) FROM heads)::text AS keys, (SELECT max(seq) FROM sel)::text AS maxseq,
            (SELECT coalesce(sum((SELECT count(*) FROM ${s}.outbox b
                                   WHERE b.lane = h.lane AND b.key COLLATE "C" = h.key AND b.published_at IS NULL
                                     AND b.dead_at IS NULL AND b.seq > h.seq)), 0) FROM heads h)::text AS behind`,
    params,
  );
  const first = await q.query<DeadPreview['sample'][number]>(
    `SELECT o.id::text AS id, o.key, o.version::text AS version, o.subject, o.type, o.last_error FROM ${s}.outbox o
      WHERE ${sql} ORDER BY o.seq LIMIT ${Math.max(0, Math.trunc(sample))}`,
    params,
  );
  const r = rows[0];
  return {
    rows: Number(r?.n ?? 0),
    keys: Number(r?.keys ?? 0),
    maxSeq: r?.maxseq ?? null,
    behind: Number(r?.behind ?? 0),
    sample: first.rows,
  };
}

export interface SettleDeadOptions extends Operator {
  /** From the preview the operator confirmed: refuse (and change nothing) when the selection no longer has exactly this many rows up to maxSeq. */
  expect?: { rows: number; maxSeq: string | null };
}

/** The selection changed between the preview and the confirmation: nothing was done. */
export class SelectionChangedError extends CommandFailedError {
  constructor(expected: number, found: number) {
    super(`nothing done: the preview selected ${expected} dead row(s), now ${found} match: preview again`);
    this.name = 'SelectionChangedError';
  }
}

/**
 * `retry` clears dead_at, attempts and next_attempt_at, so the row is due at
 * once and its key unblocks. `discard` keeps the row for audit but marks it
 * published (published_at = now(), dead_at kept, last_error prefixed with
 * "discarded by …"), so its key's later rows flow. The relays are woken by a
 * NOTIFY; the action is recorded in operator_actions in the same transaction.
 * Returns the ids changed, in seq order.
 */
export async function settleDead(
  pool: pg.Pool,
  schema: string,
  action: DeadAction,
  filter: EventFilter,
  options: SettleDeadOptions,
): Promise<string[]> {
  const s = quoteIdentifier(schema);
  const { sql, params } = filterCondition(deadOnly(filter));
  const by = options.via === 'cli' ? 'ferry dlq discard' : `ferry console (${options.actor.slice(0, 100)})`;
  let where = sql;
  const values = [...params];
  if (options.expect?.maxSeq != null) {
    values.push(options.expect.maxSeq);
    where += ` AND o.seq <= $${values.length}::bigint`;
  }
  let set: string;
  if (action === 'retry') set = `SET dead_at = NULL, attempts = 0, next_attempt_at = '-infinity'`;
  else {
    values.push(`discarded by ${by} at `);
    set = `SET published_at = now(), last_error = $${values.length}::text || now()::text || coalesce(': ' || o.last_error, '')`;
  }
  const entry = (rows: number, outcome: string): AuditEntry => ({
    actor: options.actor,
    via: options.via,
    action: action === 'retry' ? 'dlq.retry' : 'dlq.discard',
    filter: {
      ...describeFilter(deadOnly(filter)),
      ...(options.expect ? { previewed: options.expect.rows, maxSeq: options.expect.maxSeq } : {}),
    },
    rows,
    outcome,
  });
  try {
    return await withTransaction(pool, async (tx) => {
      const { rows } = await tx.query<{ id: string }>(
        `WITH done AS (UPDATE ${s}.outbox o ${set} WHERE ${where} RETURNING o.seq, o.id) SELECT id::text AS id FROM done ORDER BY seq`,
        values,
      );
      if (options.expect && rows.length !== options.expect.rows) throw new SelectionChangedError(options.expect.rows, rows.length);
      await recordAction(tx, s, entry(rows.length, 'ok'));
      if (rows.length > 0) await tx.query(NOTIFY_RELAYS_SQL, [notifyChannel(schema), 'dlq']);
      return rows.map((r) => r.id);
    });
  } catch (err) {
    if (isUndefinedTable(err)) throw auditTableMissing(schema, err);
    if (err instanceof SelectionChangedError) {
      // Recorded apart: the change rolled back, the refusal is part of the trail.
      await recordAction(pool, s, entry(0, err.message)).catch(() => {});
    }
    throw err;
  }
}
