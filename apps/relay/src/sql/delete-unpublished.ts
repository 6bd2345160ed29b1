/** Removes the canary row `$1` if no relay published it (`ferry verify` timed out). */
export function deleteUnpublishedSql(schemaSql: string): string {
  return `DELETE FROM ${schemaSql}.outbox WHERE id = $1 AND published_at IS NULL`;
}
