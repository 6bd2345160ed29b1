/** Deletes at most `$2` rows published more than `$1` ms ago, oldest first; one bounded batch. */
export function prunePublishedSql(schema: string): string {
  return `WITH doomed AS (
  SELECT seq FROM ${schema}.outbox
   WHERE published_at IS NOT NULL AND published_at < now() - $1::bigint * interval '1 millisecond'
   ORDER BY published_at
   LIMIT $2
)
DELETE FROM ${schema}.outbox o USING doomed d WHERE o.seq = d.seq`;
}
