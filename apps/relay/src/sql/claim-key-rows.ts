/**
 * The next rows of one key after `$3` (its last row sent), at most `$4`, in
 * seq order: a long chain fetches its continuation while it is still
 * sending, so a hot key's pipe does not empty between claims. The key stays
 * in flight on this instance throughout, so no other claim can take them.
 * Bytes as in the claim (claim-batch.ts): data over `$5` bytes is not
 * loaded, and the rows stop where the bytes loaded would pass `$6`. Only
 * while `$7` (this instance) holds the lane's lease unexpired.
 */
export function claimKeyRowsSql(schemaSql: string): string {
  return `SELECT x.seq::text AS seq, x.id::text AS id, x.key, x.version::text AS version, x.lane, x.subject, x.type,
       x.source, x.content_type, CASE WHEN x.data_bytes <= $5 THEN x.data END AS data, x.data_bytes, x.row_bytes, x.headers,
       x.occurred_at, date_part('epoch', x.created_at) * 1000 AS created_ms, x.attempts, (x.dead_at IS NULL AND x.next_attempt_at <= now()) AS due, 0 AS walk_step
  FROM (
    SELECT y.*, sum(y.row_bytes) OVER (ORDER BY y.seq ROWS UNBOUNDED PRECEDING) AS loaded
      FROM (
    SELECT p.seq, o.id, o.key, o.version, o.lane, o.subject, o.type, o.source, o.content_type, o.data, o.headers,
           o.occurred_at, o.created_at, p.attempts, p.dead_at, p.next_attempt_at, octet_length(o.data) AS data_bytes,
           CASE WHEN octet_length(o.data) <= $5 THEN octet_length(o.data) ELSE 0 END
             + coalesce(octet_length(o.headers::text), 0) AS row_bytes
      FROM (SELECT p.* FROM ${schemaSql}.outbox_pending p
             WHERE p.lane = $1 AND p.key = $2 AND p.seq > $3
               AND EXISTS (SELECT 1 FROM ${schemaSql}.relay_leases ll WHERE ll.lane = $1 AND ll.owner = $7 AND ll.expires_at > now())
             ORDER BY p.seq
             LIMIT $4) p
      JOIN ${schemaSql}.outbox o ON o.seq = p.seq
      ) y
  ) x
 WHERE x.loaded <= $6
 ORDER BY x.seq`;
}
