/** Published rows older than a retention of `$1` ms: what the next prune would delete (`ferry migrate --dry-run`). */
export function countPrunableSql(schemaSql: string): string {
  return `SELECT count(*)::text AS n FROM ${schemaSql}.outbox_published
        WHERE published_at < now() - $1::bigint * interval '1 millisecond'`;
}
