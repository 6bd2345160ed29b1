/** Removes the canary row `$1` if no relay published it (`ferry verify` timed out). */
export function deleteUnpublishedSql(schemaSql: string): string {
  return `DELETE FROM ${schemaSql}.outbox o WHERE o.id = $1 AND EXISTS (SELECT 1 FROM ${schemaSql}.outbox_pending p WHERE p.seq = o.seq)`;
}
