/** Insert to mark-published of row `$1` in milliseconds, on the PostgreSQL clock; null until it is marked (`ferry verify`). */
export function publishLatencySql(schemaSql: string): string {
  return `SELECT (extract(epoch FROM d.published_at - o.created_at) * 1000)::float8 AS ms
    FROM ${schemaSql}.outbox o LEFT JOIN ${schemaSql}.outbox_published d ON d.seq = o.seq WHERE o.id = $1`;
}
