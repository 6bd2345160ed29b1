-- Ferry consumer side: inbox_next_version (migration 000003) without bigint
-- overflow (issue 43). It tested `s <= p_version + n`, which is out of range
-- once p_version + n passes 2^63-1: a key applied near the top of the range
-- whose skipped list still held a version below it (a `sequential` discard,
-- then a switch to `latest`, which moves the recorded version over skipped
-- versions without clearing them, then back to `sequential`) failed its gate
-- with "bigint out of range" on every delivery and stopped for good. The
-- bound is now compared as numeric, which cannot overflow; versions at or
-- below p_version are ignored as before. The result cannot overflow either:
-- it is p_version + n only when every version from p_version + 1 to
-- p_version + n is in the bigint array, so p_version + n is one of them.
-- Same signature, so the gate and skipVersion call it unchanged, and grants
-- on it (PUBLIC by default) are kept. :SCHEMA is replaced by the quoted
-- schema name.
CREATE OR REPLACE FUNCTION :SCHEMA.inbox_next_version(p_version bigint, p_skipped bigint[]) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT p_version + coalesce(
    (SELECT max(n) FROM generate_series(1, cardinality(p_skipped)) AS n
      WHERE (SELECT count(DISTINCT s) FROM unnest(p_skipped) AS s
              WHERE s > p_version AND s::numeric <= p_version::numeric + n) = n),
    0)
$fn$;
