/**
 * Marks the acknowledged rows `$1` published: one statement per batch.
 * Fenced: `$2` is the epoch each row's lane was held under when it was
 * claimed, `$4` that lane (as claimed: a row's lane never changes, and the
 * relay role may not update it), `$3` this instance; a row is marked only
 * while its lane's lease is still that grant. A holder that lost the lane
 * changes nothing (the new holder sends the row again; inside the stream's
 * duplicate window JetStream drops the copy).
 *
 * Planned to find each row by the primary key whatever the table's
 * statistics say. The batch is checked against the lease rows alone, and
 * the seqs that pass reach the outbox as an array (`seq = ANY(ARRAY(...))`).
 * `(published_at IS NULL) IS TRUE` means `published_at IS NULL` but does not
 * let the planner use the partial `outbox_pending_key_idx`, whose third
 * column is seq. Whenever the statistics were stale (a table just filled
 * or truncated), the planner took the pending rows for few and walked that
 * index per mark: joined with the lease rows, from each of the instance's
 * lanes; given the array, over the whole index with `seq = ANY` as its
 * condition. Each mark then cost O(backlog), 231 ms at the median and up to
 * 26 s, and two relays draining 20,000 events fell from ~9,000 to ~600
 * events/s. `lane-leaser.test.ts` checks the plan with both statistics.
 */
export function markPublishedSql(schemaSql: string): string {
  return `UPDATE ${schemaSql}.outbox o
   SET published_at = now()
 WHERE o.seq = ANY (ARRAY(
         SELECT p.seq FROM unnest($1::bigint[], $2::bigint[], $4::smallint[]) AS p(seq, epoch, lane)
           JOIN ${schemaSql}.relay_leases l ON l.lane = p.lane AND l.owner = $3 AND l.epoch = p.epoch))
   AND (o.published_at IS NULL) IS TRUE`;
}
