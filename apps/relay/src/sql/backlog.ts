/**
 * Pending (not dead) rows, the age of the oldest in seconds, dead rows, and
 * blocked keys (a failed row heads them: only a key's head is ever sent):
 * for metrics and `ferry dlq`.
 */
export function backlogSql(schemaSql: string): string {
  return `SELECT count(*) FILTER (WHERE dead_at IS NULL)::bigint::text AS pending,
       coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE dead_at IS NULL)), 0)::float8 AS oldest_seconds,
       count(*) FILTER (WHERE dead_at IS NOT NULL)::bigint::text AS dead,
       count(DISTINCT p.key) FILTER (WHERE p.attempts > 0)::bigint::text AS blocked_keys
  FROM ${schemaSql}.outbox_pending p JOIN ${schemaSql}.outbox o USING (seq)`;
}
