/** Keys held behind a failed row (backing off or dead) (`ferry status`). */
export function countBlockedKeysSql(schemaSql: string): string {
  // The distinct keys in the failed rows index's order (a Unique over it, 15-25 ms for 100,000 failed
  // rows); count(DISTINCT key) sorted them all again (45 ms).
  return `SELECT count(*)::int AS n FROM (SELECT DISTINCT key FROM ${schemaSql}.outbox_pending WHERE attempts > 0) k`;
}
