/** Marks the acknowledged rows `$1` published: one statement per batch. */
export function markPublishedSql(schemaSql: string): string {
  return `UPDATE ${schemaSql}.outbox o
   SET published_at = now()
  FROM unnest($1::bigint[]) AS p(seq)
 WHERE o.seq = p.seq AND o.published_at IS NULL`;
}
