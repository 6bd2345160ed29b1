/**
 * Marks the acknowledged rows `$1` published: one statement per batch.
 * Fenced: `$2` is the epoch each row's lane was held under when it was
 * claimed, `$3` this instance, and a row is marked only while its lane's
 * lease is still that grant. A holder that lost the lane changes nothing
 * (the new holder sends the row again; inside the stream's duplicate window
 * JetStream drops the copy).
 */
export function markPublishedSql(schemaSql: string): string {
  return `UPDATE ${schemaSql}.outbox o
   SET published_at = now()
  FROM unnest($1::bigint[], $2::bigint[]) AS p(seq, epoch), ${schemaSql}.relay_leases l
 WHERE o.seq = p.seq AND o.published_at IS NULL
   AND l.lane = o.lane AND l.owner = $3 AND l.epoch = p.epoch`;
}
