/**
 * One statement publishes a whole batch:
 * - `existing` finds ids already in the outbox and whether their content is identical;
 * - a conflict anywhere writes nothing (every write below is gated on `NOT EXISTS conflicts`);
 * - `bump_auto` takes the next versions from `key_versions` with an upsert whose row
 *   lock lasts until the caller commits: that is what makes version order commit order;
 * - `bump_explicit` keeps `key_versions` at least as high as caller-supplied versions;
 * - `ins` writes the new rows in input order, so `seq` order matches version order.
 * Keys are upserted in key order so two batches cannot deadlock on each other.
 */
export function insertEventsSql(schema: string, notify: boolean): string {
  const s = schema;
  // Every CTE below is estimated at one row, so the planner would join them
  // with nested loops: O(n²) for a batch. Hence no joins between CTEs: ids
  // probe the unique index through = ANY, versions come back as one map, and
  // results are matched to inputs by id in JavaScript.
  return `WITH input AS (
  SELECT * FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bytea[], $9::jsonb[], $10::timestamptz[])
    WITH ORDINALITY AS t(id, key, version, subject, type, source, content_type, data, headers, occurred_at, ord)
),
existing AS (
  SELECT o.id, o.seq, o.version,
         (o.key, o.subject, o.type, o.source, o.content_type, o.data, o.headers)
           IS NOT DISTINCT FROM (i.key, i.subject, i.type, i.source, i.content_type, i.data, i.headers)
         AND (i.version IS NULL OR i.version = o.version) AS same
  FROM ${s}.outbox o JOIN input i ON i.id = o.id
  WHERE o.id = ANY ($1::uuid[])
),
fresh AS (
  SELECT i.*,
         row_number() OVER (PARTITION BY i.key ORDER BY i.ord) AS rank,
         count(*) OVER (PARTITION BY i.key) AS n
  FROM input i
  WHERE i.id <> ALL (ARRAY(SELECT id FROM existing))
    AND NOT EXISTS (SELECT 1 FROM existing WHERE NOT same)
),
bump_auto AS (
  INSERT INTO ${s}.key_versions AS kv (key, version)
  SELECT key, count(*) FROM fresh WHERE version IS NULL GROUP BY key ORDER BY key
  ON CONFLICT (key) DO UPDATE SET version = kv.version + excluded.version
  RETURNING kv.key, kv.version
),
bump_explicit AS (
  INSERT INTO ${s}.key_versions AS kv (key, version)
  SELECT key, max(version) FROM fresh WHERE version IS NOT NULL GROUP BY key ORDER BY key
  ON CONFLICT (key) DO UPDATE SET version = greatest(kv.version, excluded.version)
  RETURNING kv.key
),
latest AS (SELECT coalesce(jsonb_object_agg(key, version), '{}'::jsonb) AS m FROM bump_auto),
ins AS (
  INSERT INTO ${s}.outbox (id, key, version, subject, type, source, content_type, data, headers, occurred_at)
  SELECT f.id, f.key, coalesce(f.version, (l.m ->> f.key)::bigint - f.n + f.rank), f.subject, f.type, f.source,
         f.content_type, f.data, f.headers, f.occurred_at
  FROM fresh f CROSS JOIN latest l
  ORDER BY f.ord
  RETURNING id, seq, version
)
SELECT id::text, seq, version, false AS existing, true AS same FROM ins
UNION ALL
SELECT id::text, seq, version, true, same FROM existing${
    notify
      ? `
UNION ALL
SELECT NULL, NULL, NULL, false, pg_notify($11, '')::text = ''
  FROM (SELECT 1) AS x WHERE EXISTS (SELECT 1 FROM ins)`
      : ''
  }`;
}

/**
 * The same contract for exactly one event, as a much smaller statement: the
 * common `publish()` call pays for no arrays, window or sort.
 * $1 id, $2 key, $3 version (or null), $4 subject, $5 type, $6 source,
 * $7 content type, $8 data, $9 headers, $10 occurred at, [$11 channel].
 */
export function insertEventSql(schema: string, notify: boolean): string {
  const s = schema;
  return `WITH existing AS (
  SELECT o.id, o.seq, o.version,
         (o.key, o.subject, o.type, o.source, o.content_type, o.data, o.headers)
           IS NOT DISTINCT FROM ($2::text, $4::text, $5::text, $6::text, $7::text, $8::bytea, $9::jsonb)
         AND ($3::bigint IS NULL OR $3::bigint = o.version) AS same
  FROM ${s}.outbox o WHERE o.id = $1::uuid
),
bump AS (
  INSERT INTO ${s}.key_versions AS kv (key, version)
  SELECT $2::text, coalesce($3::bigint, 1) WHERE NOT EXISTS (SELECT 1 FROM existing)
  ON CONFLICT (key) DO UPDATE
    SET version = CASE WHEN $3::bigint IS NULL THEN kv.version + 1 ELSE greatest(kv.version, excluded.version) END
  RETURNING kv.version
),
ins AS (
  INSERT INTO ${s}.outbox (id, key, version, subject, type, source, content_type, data, headers, occurred_at)
  SELECT $1::uuid, $2::text, coalesce($3::bigint, b.version), $4::text, $5::text, $6::text, $7::text, $8::bytea, $9::jsonb, $10::timestamptz
  FROM bump b
  RETURNING id, seq, version
)
SELECT id::text, seq, version, false AS existing, true AS same FROM ins
UNION ALL
SELECT id::text, seq, version, true, same FROM existing${
    notify
      ? `
UNION ALL
SELECT NULL, NULL, NULL, false, pg_notify($11, '')::text = ''
  FROM (SELECT 1) AS x WHERE EXISTS (SELECT 1 FROM ins)`
      : ''
  }`;
}
