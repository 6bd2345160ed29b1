/**
 * One outbox row `$1` (`ferry dlq show`), with how many later rows of its key wait behind it: its
 * data's first `$2` bytes only, and its whole size, so a huge stored row is shown, not loaded.
 */
export function showEventSql(schemaSql: string): string {
  return `SELECT o.seq::text AS seq, o.id::text AS id, o.key, o.version::text AS version, o.lane, o.subject, o.type, o.source, o.content_type,
              substring(o.data FROM 1 FOR $2::integer) AS data, octet_length(o.data) AS data_bytes, o.headers, o.occurred_at, o.created_at, o.attempts, o.next_attempt_at, o.dead_at, o.published_at, o.last_error,
              (SELECT count(*) FROM ${schemaSql}.outbox b
                WHERE b.lane = o.lane AND b.key COLLATE "C" = o.key AND b.published_at IS NULL AND b.seq > o.seq)::text AS blocked
         FROM ${schemaSql}.outbox o WHERE o.id = $1::uuid`;
}
