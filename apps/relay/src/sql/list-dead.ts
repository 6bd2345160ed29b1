import { deadCondition } from './dead-events.js';

/**
 * Dead rows, oldest first, at most `$1` (`ferry dlq list`), each with how many
 * later rows of its key wait behind it; with `failed`, the rows the relay is
 * backing off from too (`attempts > 0`: outbox_failed_idx).
 */
export function listDeadSql(schemaSql: string, failed = false): string {
  const where = failed ? 'o.published_at IS NULL AND o.attempts > 0' : deadCondition('all');
  return `SELECT o.seq::text AS seq, o.id::text AS id, o.key, o.version::text AS version, o.subject, o.type, o.attempts, o.dead_at, o.last_error,
                    o.next_attempt_at,
                    (SELECT count(*) FROM ${schemaSql}.outbox b
                      WHERE b.lane = o.lane AND b.key COLLATE "C" = o.key AND b.published_at IS NULL AND b.seq > o.seq)::int AS waiting
               FROM ${schemaSql}.outbox o WHERE ${where} ORDER BY o.seq LIMIT $1`;
}
