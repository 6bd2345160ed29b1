/** Rows published (not discarded) in the last minute (`ferry status`). */
export function publishedRecentlySql(schemaSql: string): string {
  return `SELECT count(*)::text AS n FROM ${schemaSql}.outbox_published WHERE published_at > now() - interval '1 minute' AND dead_at IS NULL`;
}
