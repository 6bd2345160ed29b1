import { type DeadSelector, deadCondition } from './dead-events.js';

/**
 * `retry`: clears dead_at, attempts and next_attempt_at, so the row is due at
 * once and its key unblocks. `discard`: the row stays for audit but is marked
 * published (published_at = now(), dead_at kept, last_error prefixed with
 * "discarded"), so it no longer blocks its key; it is pruned with the
 * published rows after the retention. Returns the ids it changed.
 */
export function settleDeadSql(schemaSql: string, action: 'retry' | 'discard', selector: DeadSelector): string {
  const set =
    action === 'retry'
      ? `SET dead_at = NULL, attempts = 0, next_attempt_at = '-infinity'`
      : `SET published_at = now(),
       last_error = 'discarded by ferry dlq discard at ' || now()::text || coalesce(': ' || last_error, '')`;
  return `UPDATE ${schemaSql}.outbox o ${set} WHERE ${deadCondition(selector)} RETURNING o.id::text AS id`;
}
