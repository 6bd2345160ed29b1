/**
 * Records failed attempts, one statement per batch: `$1` seqs, `$2` errors,
 * `$3` backoff delays in ms, `$4` dead flags, `$5` the epochs their lanes were
 * claimed under, `$6` this instance, `$7` the rows' lanes, `$8` the attempts
 * each row was claimed with. A dead row keeps its next_attempt_at; a retried
 * one waits until now() + its delay. Fenced like the mark, and planned like it
 * (mark-published.ts): a holder that lost the lane neither counts an attempt
 * nor kills a row. Fenced on the row as well: an operator may retry or
 * discard a failed row while a relay is sending it (`ferry dlq`, the
 * console), and that word stands. A discard deleted its pending row (outbox migration 000015); a retry
 * reset its attempts to 0, which no claim of a failed row (attempts > 0) can
 * carry, so a late failure record neither sends it back to backing off nor
 * kills it with the count it had before the retry.
 */
export function markFailedSql(schemaSql: string): string {
  return `UPDATE ${schemaSql}.outbox_pending o
   SET attempts = o.attempts + 1,
       last_error = f.error,
       next_attempt_at = CASE WHEN f.dead THEN o.next_attempt_at ELSE now() + f.delay_ms * interval '1 millisecond' END,
       dead_at = CASE WHEN f.dead THEN now() ELSE NULL END
  FROM unnest($1::bigint[], $2::text[], $3::integer[], $4::boolean[], $8::integer[]) AS f(seq, error, delay_ms, dead, attempts)
 WHERE o.seq = f.seq AND o.attempts = f.attempts
   AND o.seq = ANY (ARRAY(
         SELECT p.seq FROM unnest($1::bigint[], $5::bigint[], $7::smallint[]) AS p(seq, epoch, lane)
           JOIN ${schemaSql}.relay_leases l ON l.lane = p.lane AND l.owner = $6 AND l.epoch = p.epoch))`;
}
