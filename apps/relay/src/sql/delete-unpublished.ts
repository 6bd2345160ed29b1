/**
 * Removes the canary row `$1` if no relay published it (`ferry verify` timed
 * out). Its pending row goes first: a relay's mark deletes the same row, so
 * whichever commits first wins, and a canary marked while this waited is not
 * deleted (the event row is never locked by a mark since outbox migration
 * 000015, so a condition on it alone could not see the mark). The row count
 * is 1 when the canary was deleted.
 */
export function deleteUnpublishedSql(schemaSql: string): string {
  return `WITH p AS (
  DELETE FROM ${schemaSql}.outbox_pending p WHERE p.seq = (SELECT o.seq FROM ${schemaSql}.outbox o WHERE o.id = $1) RETURNING p.seq
)
DELETE FROM ${schemaSql}.outbox o USING p WHERE o.seq = p.seq`;
}
