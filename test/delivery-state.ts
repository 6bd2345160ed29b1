import { quoteIdentifier } from '@ferry/core';

// Tests that put an event in a state by hand (failed, dead, published, pending again) write its
// delivery state where it lives since outbox migration 000015: its narrow row in outbox_pending
// (attempts, next_attempt_at, last_error, dead_at) or outbox_published (published_at), never the
// event row. `where` is a condition on the outbox aliased `o`, with `params` as $1…; reads use the
// `outbox_events` view (the outbox with the columns it had before 000015).

interface Queryable {
  query(sql: string, params?: unknown[]): Promise<{ rowCount?: number | null; rows: unknown[] }>;
}

export interface FailedState {
  attempts: number;
  lastError?: string | null;
  /** Dead (`dead_at = now()`) or backing off. */
  dead?: boolean;
  /** SQL for next_attempt_at, e.g. `now() + interval '1 hour'`; left as it is when absent. */
  nextAttemptAt?: string;
}

/** Sets the pending rows of the selected events failed: their attempts, reason and dead_at. Returns the rows changed. */
export async function setFailed(db: Queryable, schema: string, where: string, params: unknown[], state: FailedState): Promise<number> {
  const s = quoteIdentifier(schema);
  const values = [...params, state.attempts, state.lastError ?? null, state.dead === true];
  const n = params.length;
  const next = state.nextAttemptAt ? `, next_attempt_at = ${state.nextAttemptAt}` : '';
  const r = await db.query(
    `UPDATE ${s}.outbox_pending p SET attempts = $${n + 1}::integer, last_error = $${n + 2}::text,
            dead_at = CASE WHEN $${n + 3}::boolean THEN now() END${next}
       FROM ${s}.outbox o WHERE o.seq = p.seq AND (${where})`,
    values,
  );
  return r.rowCount ?? 0;
}

/** Marks the selected pending events published (at `publishedAt`, SQL, default now()), as the relay's mark does. Returns the rows marked. */
export async function markPublished(
  db: Queryable,
  schema: string,
  where: string,
  params: unknown[] = [],
  publishedAt = 'now()',
): Promise<number> {
  const s = quoteIdentifier(schema);
  const r = await db.query(
    `WITH gone AS (DELETE FROM ${s}.outbox_pending p USING ${s}.outbox o WHERE o.seq = p.seq AND (${where})
                   RETURNING p.seq, p.attempts, p.last_error)
     INSERT INTO ${s}.outbox_published (seq, published_at, attempts, last_error)
     SELECT g.seq, ${publishedAt}, g.attempts, g.last_error FROM gone g`,
    params,
  );
  return r.rowCount ?? 0;
}

/** Makes the selected published events pending again, due at once, as if never sent. Returns the rows changed. */
export async function markPending(db: Queryable, schema: string, where: string, params: unknown[] = []): Promise<number> {
  const s = quoteIdentifier(schema);
  const r = await db.query(
    `WITH gone AS (DELETE FROM ${s}.outbox_published d USING ${s}.outbox o WHERE o.seq = d.seq AND (${where}) RETURNING d.seq)
     INSERT INTO ${s}.outbox_pending (seq, lane, key) SELECT o.seq, o.lane, o.key FROM gone g JOIN ${s}.outbox o ON o.seq = g.seq`,
    params,
  );
  return r.rowCount ?? 0;
}
