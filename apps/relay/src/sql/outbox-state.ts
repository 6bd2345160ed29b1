/**
 * An event's delivery state lives beside its row since outbox migration 000015: a pending event has
 * a row in `outbox_pending` (its attempts, next attempt, last error and dead_at), a delivered or
 * discarded one a row in `outbox_published` (when, the attempts and last error it had, and dead_at
 * for a discard). Every outbox row has exactly one of the two.
 *
 * The read paths that show a row's state join both to the outbox `o` as `p` and `d`; a condition
 * on `p.attempts` (strict) lets the planner start from `outbox_pending_failed_idx` instead of the outbox.
 */
export function outboxWithState(schemaSql: string): string {
  return `${schemaSql}.outbox o LEFT JOIN ${schemaSql}.outbox_pending p ON p.seq = o.seq LEFT JOIN ${schemaSql}.outbox_published d ON d.seq = o.seq`;
}

/** The delivery-state columns of `outboxWithState`, named as the outbox's own columns were before 000015. */
export const STATE_COLUMNS = `coalesce(p.attempts, d.attempts, 0) AS attempts, p.next_attempt_at, coalesce(p.last_error, d.last_error) AS last_error,
       coalesce(p.dead_at, d.dead_at) AS dead_at, d.published_at`;

/** How many later rows of the key of `h` (with `lane`, `key`, `seq`) wait behind it: its pending rows after it (the walk index alone). */
export function waitingBehind(schemaSql: string, h: string): string {
  return `(SELECT count(*) FROM ${schemaSql}.outbox_pending b WHERE b.lane = ${h}.lane AND b.key = ${h}.key AND b.seq > ${h}.seq)`;
}
