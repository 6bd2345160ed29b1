import { deadCondition } from './dead-events.js';

/** Dead rows, oldest first, at most `$1` (`ferry dlq list`), each with how many later rows of its key wait behind it. */
export function listDeadSql(schemaSql: string): string {
  return `SELECT o.seq::text AS seq, o.id::text AS id, o.key, o.version::text AS version, o.subject, o.type, o.attempts, o.dead_at, o.last_error,
                    (SELECT count(*) FROM ${schemaSql}.outbox b
                      WHERE b.lane = o.lane AND b.key COLLATE "C" = o.key AND b.published_at IS NULL AND b.seq > o.seq)::int AS waiting
               FROM ${schemaSql}.outbox o WHERE ${deadCondition('all')} ORDER BY o.seq LIMIT $1`;
}
