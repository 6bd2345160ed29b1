/**
 * The outbox's one retention, in the `settings` table (outbox migration
 * 000006 stores the 7-day default; `ferry migrate --retention` changes it).
 * The prune job reads it at every run, so every relay prunes by the same
 * window whatever its own flags say.
 */
export function readRetentionSql(schemaSql: string): string {
  return `SELECT value::bigint::text AS ms FROM ${schemaSql}.settings WHERE name = 'retention_ms'`;
}

/** $1: the retention in milliseconds. */
export function setRetentionSql(schemaSql: string): string {
  return `INSERT INTO ${schemaSql}.settings (name, value) VALUES ('retention_ms', $1::bigint::text)
ON CONFLICT (name) DO UPDATE SET value = excluded.value`;
}
