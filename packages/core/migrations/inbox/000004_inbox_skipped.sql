-- Versions an operator discarded (`ferry inbox parked discard`) in
-- `sequential` mode while an earlier version of the key was still missing
-- (issue 14). Discarding v3 while v2 had not arrived used to record 3, so v2,
-- arriving later, was dropped as stale: discarding one version skipped
-- others. Now the recorded version stays, v3 goes here, and the gate, on
-- applying v2, moves the recorded version over the contiguous skipped ones
-- (inbox_next_version). Empty for nearly every key.
ALTER TABLE :SCHEMA.inbox_versions ADD COLUMN skipped bigint[] NOT NULL DEFAULT '{}';

-- The recorded version after applying p_version: p_version, then on over
-- every skipped version that follows it without a hole.
CREATE FUNCTION :SCHEMA.inbox_next_version(p_version bigint, p_skipped bigint[]) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT p_version + coalesce(
    (SELECT max(n) FROM generate_series(1, cardinality(p_skipped)) AS n
      WHERE (SELECT count(DISTINCT s) FROM unnest(p_skipped) AS s WHERE s > p_version AND s <= p_version + n) = n),
    0)
$fn$;
