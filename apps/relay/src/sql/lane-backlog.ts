/** Per lane: pending (not dead) rows, dead rows, and the age of the oldest pending row in seconds (`ferry status`). */
export function laneBacklogSql(schemaSql: string): string {
  return `SELECT p.lane, count(*) FILTER (WHERE dead_at IS NULL)::text AS pending,
              count(*) FILTER (WHERE dead_at IS NOT NULL)::text AS dead,
              coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE dead_at IS NULL)), 0)::float8 AS oldest
         FROM ${schemaSql}.outbox_pending p JOIN ${schemaSql}.outbox o USING (seq) GROUP BY p.lane`;
}
