/** Keys held behind a failed row (backing off or dead) (`ferry status`). */
export function countBlockedKeysSql(schemaSql: string): string {
  return `SELECT count(DISTINCT key)::int AS n FROM ${schemaSql}.outbox WHERE published_at IS NULL AND attempts > 0`;
}
