/**
 * Live relay instances of this schema: each holds a session advisory lock
 * `(instance namespace, its id)` for as long as its lease connection lives,
 * so a crashed instance drops out of the count at once. `$1` is the namespace.
 */
export const LIVE_INSTANCES_SQL = `SELECT count(DISTINCT objid)::int AS n FROM pg_locks
 WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid = $1::int::oid
   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`;

/**
 * Tries the lanes not held (`$3` held, `$2` lane count) starting at `$4`,
 * taking at most `$5`. The scan has no sort, so the lock function runs only
 * until the limit is met; CASE keeps it off lanes already held (a session
 * advisory lock is re-entrant, a second grant would need a second unlock).
 */
export const TRY_LANES_SQL = `SELECT lane FROM (
  SELECT ((s + $4::int) % $2::int) AS lane FROM generate_series(0, $2::int - 1) AS s
) c
 WHERE CASE WHEN lane = ANY ($3::int[]) THEN false ELSE pg_try_advisory_lock($1::int, lane) END
 LIMIT $5`;
