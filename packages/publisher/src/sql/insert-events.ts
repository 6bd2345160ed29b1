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
  return `WITH input AS (
  SELECT * FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bytea[], $9::jsonb[], $10::timestamptz[])
    WITH ORDINALITY AS t(id, key, version, subject, type, source, content_type, data, headers, occurred_at, ord)
),
existing AS (
  SELECT i.ord, o.seq, o.version, o.key,
         (o.key, o.subject, o.type, o.source, o.content_type, o.data, o.headers)
           IS NOT DISTINCT FROM (i.key, i.subject, i.type, i.source, i.content_type, i.data, i.headers)
         AND (i.version IS NULL OR i.version = o.version) AS same
  FROM input i JOIN ${s}.outbox o ON o.id = i.id
),
conflicts AS (SELECT ord FROM existing WHERE NOT same),
fresh AS (
  SELECT i.*, row_number() OVER (PARTITION BY i.key ORDER BY i.ord) AS rank
  FROM input i
  WHERE NOT EXISTS (SELECT 1 FROM existing e WHERE e.ord = i.ord)
    AND NOT EXISTS (SELECT 1 FROM conflicts)
),
per_key AS (
  SELECT key, count(*) AS n, max(version) AS max_version, bool_or(version IS NULL) AS auto
  FROM fresh GROUP BY key
),
bump_auto AS (
  INSERT INTO ${s}.key_versions AS kv (key, version)
  SELECT key, n FROM per_key WHERE auto ORDER BY key
  ON CONFLICT (key) DO UPDATE SET version = kv.version + excluded.version
  RETURNING kv.key, kv.version
),
bump_explicit AS (
  INSERT INTO ${s}.key_versions AS kv (key, version)
  SELECT key, max_version FROM per_key WHERE NOT auto ORDER BY key
  ON CONFLICT (key) DO UPDATE SET version = greatest(kv.version, excluded.version)
  RETURNING kv.key
),
ins AS (
  INSERT INTO ${s}.outbox (id, key, version, subject, type, source, content_type, data, headers, occurred_at)
  SELECT f.id, f.key, coalesce(f.version, b.version - p.n + f.rank), f.subject, f.type, f.source,
         f.content_type, f.data, f.headers, f.occurred_at
  FROM fresh f
  JOIN per_key p ON p.key = f.key
  LEFT JOIN bump_auto b ON b.key = f.key
  ORDER BY f.ord
  RETURNING id, seq, version
)
SELECT i.ord, ins.seq, ins.version, false AS existing, true AS same
  FROM ins JOIN input i ON i.id = ins.id
UNION ALL
SELECT e.ord, e.seq, e.version, true, e.same FROM existing e${
    notify
      ? `
UNION ALL
SELECT 0, NULL, NULL, false, pg_notify($11, '')::text = ''
  FROM (SELECT 1) AS x WHERE EXISTS (SELECT 1 FROM ins)`
      : ''
  }`;
}
