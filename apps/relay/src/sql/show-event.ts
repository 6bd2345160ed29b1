/** One outbox row `$1` in full (`ferry dlq show`), with how many later rows of its key wait behind it. */
export function showEventSql(schemaSql: string): string {
  return `SELECT o.seq::text AS seq, o.id::text AS id, o.key, o.version::text AS version, o.lane, o.subject, o.type, o.source, o.content_type,
              o.data, o.headers, o.occurred_at, o.created_at, o.attempts, o.next_attempt_at, o.dead_at, o.published_at, o.last_error,
              (SELECT count(*) FROM ${schemaSql}.outbox b
                WHERE b.lane = o.lane AND b.key COLLATE "C" = o.key AND b.published_at IS NULL AND b.seq > o.seq)::text AS blocked
         FROM ${schemaSql}.outbox o WHERE o.id = $1::uuid`;
}
