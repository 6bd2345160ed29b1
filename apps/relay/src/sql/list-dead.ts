import { deadCondition } from './dead-events.js';
import { waitingBehind } from './outbox-state.js';

/**
 * Dead rows, oldest first, at most `$1` (`ferry dlq list`), each with how many
 * later rows of its key wait behind it; with `failed`, the rows the relay is
 * backing off from too (`attempts > 0`: outbox_pending_failed_idx).
 */
export function listDeadSql(schemaSql: string, failed = false): string {
  const where = failed ? 'p.attempts > 0' : deadCondition('all');
  return `SELECT o.seq::text AS seq, o.id::text AS id, o.key, o.version::text AS version, o.subject, o.type, p.attempts, p.dead_at, p.last_error,
                    p.next_attempt_at, ${waitingBehind(schemaSql, 'p')}::int AS waiting
               FROM ${schemaSql}.outbox_pending p JOIN ${schemaSql}.outbox o ON o.seq = p.seq WHERE ${where} ORDER BY p.seq LIMIT $1`;
}
