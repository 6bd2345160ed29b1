/**
 * The next rows of one key after `$3` (its last row sent), at most `$4`, in
 * seq order: a long chain fetches its continuation while it is still
 * sending, so a hot key's pipe does not empty between claims. The key stays
 * in flight on this instance throughout, so no other claim can take them.
 */
export function claimKeyRowsSql(schemaSql: string): string {
  return `SELECT o.seq::text AS seq, o.id::text AS id, o.key, o.version::text AS version, o.lane, o.subject, o.type,
       o.source, o.content_type, o.data, o.headers, o.occurred_at, o.created_at, o.attempts,
       (o.dead_at IS NULL AND o.next_attempt_at <= now()) AS due, ''::text AS cursor
  FROM ${schemaSql}.outbox o
 WHERE o.lane = $1 AND o.key COLLATE "C" = $2 AND o.published_at IS NULL AND o.seq > $3
 ORDER BY o.seq
 LIMIT $4`;
}
