/**
 * Claims work by key: for up to `$4` keys of the leased lanes `$1`, the rows
 * of the key from its head (its first unpublished row) on, in `seq` order.
 *
 * A key is claimable only when its head is due (not dead, not backing off)
 * and the key is not in flight on this instance (`$3`). The relay sends a
 * key's next row only after the previous one's PubAck, so a key's rows reach
 * the stream in order whatever fails; claiming from the head is what makes
 * that hold across batches and instances: no later row of a key can be
 * claimed while an earlier one is unpublished.
 *
 * Each lane's distinct keys are walked with a recursive skip scan over
 * `outbox_pending_walk_idx (lane, key, seq)` of the narrow pending table
 * (outbox migration 000015; the event row is read only for the rows claimed), one index descent per key,
 * starting after the lane's cursor `$2` (the last key claimed there) and
 * wrapping around to the lane's first key, so every key gets its turn. The
 * descent lands on the key's first entry, its head (its lowest seq), so the
 * walk carries the head's seq and state and no second descent looks for it
 * (16 → 14 µs of PostgreSQL CPU per claimed event, drain-pg-cost). A key
 * blocked behind a failed head costs one probe however many rows wait behind
 * it (walking pending rows in seq order cost 445-520 ms per claim with
 * 500,000 rows behind a blocked head).
 *
 * `walk_step` is the key's place in its lane's walk: the lane's next `$2`
 * is the key of the highest step the claim returned (the last key in walk
 * order), taken by the relay from the rows. It was a window over the rows
 * claimed (the greatest key of the lane, or of its wrapped keys), which
 * sorted every row by lane once more: a fifth of the claim's PostgreSQL
 * CPU (20 → 16 µs per event, `node bench/dist/scenarios/drain-pg-cost.js`).
 * Keys compare in the "C" collation (byte order, as the index is built): a
 * skip scan under a linguistic collation spent its time in strcoll.
 *
 * Rows per key: up to `$5` (the room for rows) shared evenly among the keys
 * found. `due` is false for a row behind the head that is itself dead or
 * backing off (the dispatcher sends nothing from there on).
 *
 * Bytes: a row's data is loaded only when it has at most `$6` bytes (the
 * server's max_payload, at most 64 MiB): a larger one could never be sent,
 * and one of 280 MB made every relay die in pg-protocol on every claim. Such
 * a row comes back with `data` null and its size in `data_bytes`, and goes
 * dead. The rows, in seq order, stop where the bytes loaded (data and
 * headers' JSON: a row may hold 64 headers of 4,096 four-byte characters,
 * 1 MiB, whatever its data) would pass `$7` bytes (the in-flight byte budget left), the first row always included: a
 * cut in seq order leaves each key a prefix of its rows, as order requires.
 *
 * Leases: only lanes `$8` (this instance) holds with an unexpired term are
 * walked, checked by the database's clock in the same statement (outbox
 * migration 000010): a claim that reaches the server after the lease ran
 * out, from a relay that was frozen or cut off, finds nothing.
 */
export function claimBatchSql(schemaSql: string): string {
  return `WITH RECURSIVE walk(lane, key, after, wrapped, step, seq, dead_at, next_attempt_at) AS (
  SELECT l.lane, s.key, l.after, s.wrapped, 1, s.seq, s.dead_at, s.next_attempt_at
    FROM unnest($1::smallint[], $2::text[]) AS l(lane, after)
    JOIN ${schemaSql}.relay_leases ll ON ll.lane = l.lane AND ll.owner = $8 AND ll.expires_at > now()
   CROSS JOIN LATERAL (
     (SELECT o.key, false AS wrapped, o.seq, o.dead_at, o.next_attempt_at FROM ${schemaSql}.outbox_pending o
       WHERE o.lane = l.lane AND o.key > l.after ORDER BY o.key, o.seq LIMIT 1)
     UNION ALL
     (SELECT o.key, true, o.seq, o.dead_at, o.next_attempt_at FROM ${schemaSql}.outbox_pending o
       WHERE o.lane = l.lane AND o.key <= l.after ORDER BY o.key, o.seq LIMIT 1)
     LIMIT 1) s
  UNION ALL
  SELECT w.lane, s.key, w.after, s.wrapped, w.step + 1, s.seq, s.dead_at, s.next_attempt_at
    FROM walk w
   CROSS JOIN LATERAL (
     (SELECT o.key, w.wrapped, o.seq, o.dead_at, o.next_attempt_at FROM ${schemaSql}.outbox_pending o
       WHERE o.lane = w.lane AND o.key > w.key ORDER BY o.key, o.seq LIMIT 1)
     UNION ALL
     (SELECT o.key, true, o.seq, o.dead_at, o.next_attempt_at FROM ${schemaSql}.outbox_pending o
       WHERE NOT w.wrapped AND o.lane = w.lane ORDER BY o.key, o.seq LIMIT 1)
     LIMIT 1) s
   WHERE NOT (s.wrapped AND s.key > w.after)
),
heads AS MATERIALIZED (
  SELECT w.lane, w.key, w.step, w.seq
    FROM walk w
   WHERE w.dead_at IS NULL AND w.next_attempt_at <= now()
     AND w.key NOT IN (SELECT unnest($3::text[]))
   LIMIT $4
)
SELECT x.seq::text AS seq, x.id::text AS id, x.key, x.version::text AS version, x.lane, x.subject, x.type,
       x.source, x.content_type, CASE WHEN x.data_bytes <= $6 THEN x.data END AS data, x.data_bytes, x.row_bytes, x.headers,
       x.occurred_at, date_part('epoch', x.created_at) * 1000 AS created_ms, x.attempts, x.due, x.step AS walk_step
  FROM (
    SELECT y.*, sum(y.row_bytes) OVER (ORDER BY y.seq ROWS UNBOUNDED PRECEDING) AS loaded
      FROM (
    SELECT r.seq, o.id, o.key, o.version, o.lane, o.subject, o.type, o.source, o.content_type, o.data, o.headers,
           o.occurred_at, o.created_at, r.attempts, h.step, octet_length(o.data) AS data_bytes,
           (r.dead_at IS NULL AND r.next_attempt_at <= now()) AS due,
           CASE WHEN octet_length(o.data) <= $6 THEN octet_length(o.data) ELSE 0 END
             + coalesce(octet_length(o.headers::text), 0) AS row_bytes
      FROM heads h
     CROSS JOIN LATERAL (
       SELECT p.seq, p.attempts, p.dead_at, p.next_attempt_at FROM ${schemaSql}.outbox_pending p
        WHERE p.lane = h.lane AND p.key = h.key AND p.seq >= h.seq
        ORDER BY p.seq
        LIMIT greatest(1, $5::bigint / (SELECT count(*) FROM heads))) r
      JOIN ${schemaSql}.outbox o ON o.seq = r.seq
      ) y
  ) x
 WHERE x.loaded <= $7 OR x.loaded = x.row_bytes
 ORDER BY x.seq`;
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
  /** Null when the row's data is over the claim's `$6` bytes: it was not loaded (see `data_bytes`). */
  data: Buffer | null;
  /** The data's size, measured in PostgreSQL. */
  data_bytes: number;
  /** What the claim loaded of the row, as the in-flight budget counts it: its data (when loaded) and its headers' JSON. */
  row_bytes: number;
  headers: Record<string, string>;
  occurred_at: Date;
  /**
   * The row's created_at in milliseconds since 1970 (for the commit-to-PubAck histogram only): a
   * number, where a timestamptz is parsed into a Date, a regular expression or two per row.
   */
  created_ms: number;
  attempts: number;
  /**
   * The key's place in its lane's walk (1 for the first key after the lane's
   * cursor): the lane's next cursor is the key of its highest step (0 from a
   * chain's continuation, `claim-key-rows.ts`, which moves no cursor).
   */
  walk_step: number;
  /** False for a row behind the head that is dead or backing off: nothing of its key is sent from it on. */
  due: boolean;
}
