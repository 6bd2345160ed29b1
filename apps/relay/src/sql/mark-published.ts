/**
 * Marks the acknowledged rows `$1` published: one statement per batch, which
 * deletes their narrow pending rows and records each as published (outbox
 * migration 000015: the event row itself is never rewritten; updating it
 * cost 14.0-14.5 µs of PostgreSQL CPU per event, this 4.5-5.5 µs, in
 * drain-pg-cost's runs of 2026-12-03).
 * Fenced: `$2` is the epoch each row's lane was held under when it was
 * claimed, `$4` that lane (as claimed: a row's lane never changes, and the
 * relay role may not update it), `$3` this instance; a row is marked only
 * while its lane's lease is still that grant. A holder that lost the lane
 * changes nothing (the new holder sends the row again; inside the stream's
 * duplicate window JetStream drops the copy).
 *
 * Planned to find each row by the primary key whatever the table's
 * statistics say. The batch is checked against the lease rows alone, and
 * the seqs that pass reach the pending table as an array (`seq = ANY(ARRAY(...))`).
 * Joined with the lease rows directly, with stale statistics (a table just
 * filled or truncated) the planner walked the pending index per mark from
 * each of the instance's lanes: O(backlog), 231 ms at the median and up to
 * 26 s, and two relays draining 20,000 events fell from ~9,000 to ~600
 * events/s. `lane-leaser.test.ts` checks the plan with both statistics.
 * The row count is the rows marked.
 */
export function markPublishedSql(schemaSql: string): string {
  return `WITH done AS (
  DELETE FROM ${schemaSql}.outbox_pending o
   WHERE o.seq = ANY (ARRAY(
           SELECT p.seq FROM unnest($1::bigint[], $2::bigint[], $4::smallint[]) AS p(seq, epoch, lane)
             JOIN ${schemaSql}.relay_leases l ON l.lane = p.lane AND l.owner = $3 AND l.epoch = p.epoch))
  RETURNING o.seq, o.attempts, o.last_error
)
INSERT INTO ${schemaSql}.outbox_published (seq, attempts, last_error)
SELECT d.seq, d.attempts, d.last_error FROM done d`;
}
