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
 * Each lane is walked through `outbox_pending_lane_idx` (index only) in seq
 * order, and each candidate row is then fetched by its primary key; both
 * subqueries are fenced with OFFSET 0. Left to itself the planner prefers the
 * primary key for `ORDER BY seq` (believing pending rows spread evenly) or a
 * merge join against it, and either wades through every published row still
 * in the table on each claim: quadratic over a drain. The caller rotates the
 * lane array so that no lane starves.
 */
export function claimBatchSql(schema: string): string {
  return `SELECT x.seq::text AS seq, x.id::text AS id, x.key, x.version::text AS version, x.lane, x.subject, x.type,
       x.source, x.content_type, x.data, x.headers, x.occurred_at, x.created_at, x.attempts
  FROM unnest($1::smallint[]) AS l(lane)
  CROSS JOIN LATERAL (
    SELECT o.seq, o.id, o.key, o.version, o.lane, o.subject, o.type, o.source, o.content_type, o.data, o.headers,
           o.occurred_at, o.created_at, o.attempts
      FROM (SELECT p.seq FROM ${schema}.outbox p
             WHERE p.lane = l.lane AND p.published_at IS NULL AND p.seq <> ALL ($2::bigint[])
             ORDER BY p.seq
            OFFSET 0) c
      CROSS JOIN LATERAL (
        SELECT * FROM ${schema}.outbox r
         WHERE r.seq = c.seq
           AND r.published_at IS NULL
           AND r.dead_at IS NULL
           AND r.next_attempt_at <= now()
           AND r.key <> ALL ($3::text[])
        OFFSET 0
      ) o
     WHERE NOT EXISTS (
             SELECT 1 FROM ${schema}.outbox b
              WHERE b.key = o.key AND b.published_at IS NULL AND b.attempts > 0 AND b.seq < o.seq
                AND (b.dead_at IS NOT NULL OR b.next_attempt_at > now()))
     ORDER BY c.seq
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
