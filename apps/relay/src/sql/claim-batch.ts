/**
 * Claims up to `$4` due rows of the leased lanes `$1`, in `seq` order within
 * each lane, leaving out:
 * - rows in flight on this instance (`$2`, their seqs);
 * - keys with a retried row in flight (`$3`): their later rows wait for the
 *   retry's outcome;
 * - keys blocked by an earlier unpublished row that failed (backing off or
 *   dead). `outbox_retrying_key_idx` holds only such rows, so this check is a
 *   lookup in an almost empty index.
 *
 * Each lane is read through `outbox_pending_lane_idx` in seq order; the caller
 * rotates the lane array so that no lane starves.
 */
export function claimBatchSql(schema: string): string {
  return `SELECT x.seq::text AS seq, x.id::text AS id, x.key, x.version::text AS version, x.lane, x.subject, x.type,
       x.source, x.content_type, x.data, x.headers, x.occurred_at, x.created_at, x.attempts
  FROM unnest($1::smallint[]) AS l(lane)
  CROSS JOIN LATERAL (
    SELECT o.seq, o.id, o.key, o.version, o.lane, o.subject, o.type, o.source, o.content_type, o.data, o.headers,
           o.occurred_at, o.created_at, o.attempts
      FROM ${schema}.outbox o
     WHERE o.lane = l.lane
       AND o.published_at IS NULL
       AND o.dead_at IS NULL
       AND o.next_attempt_at <= now()
       AND o.seq <> ALL ($2::bigint[])
       AND o.key <> ALL ($3::text[])
       AND NOT EXISTS (
             SELECT 1 FROM ${schema}.outbox b
              WHERE b.key = o.key AND b.published_at IS NULL AND b.attempts > 0 AND b.seq < o.seq
                AND (b.dead_at IS NOT NULL OR b.next_attempt_at > now()))
     ORDER BY o.seq
     LIMIT $4
  ) x
 LIMIT $4`;
}

export interface ClaimedRow {
  seq: string;
  id: string;
  key: string;
  version: string;
  lane: number;
  subject: string;
  type: string;
  source: string;
  content_type: string;
  data: Buffer;
  headers: Record<string, string>;
  occurred_at: Date;
  created_at: Date;
  attempts: number;
}
