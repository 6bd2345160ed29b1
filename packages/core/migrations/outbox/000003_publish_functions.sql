-- The publisher's two statements as SECURITY DEFINER functions, so that a
-- publishing role needs EXECUTE on them and nothing else: it can append events
-- but neither read nor change the outbox's other rows. PL/pgSQL also caches
-- their plans per connection, whatever driver or ORM calls them.
-- :SCHEMA is replaced by the quoted schema name.

-- One event. Returns the new row, or the stored one when the id exists (same
-- = false when its content differs: the caller raises a conflict; nothing is
-- written). A NOTIFY on p_channel (when not null) wakes a listening relay.
CREATE FUNCTION :SCHEMA.publish_event(
  p_id uuid, p_key text, p_version bigint, p_subject text, p_type text, p_source text,
  p_content_type text, p_data bytea, p_headers jsonb, p_occurred_at timestamptz, p_channel text
) RETURNS TABLE (id text, seq bigint, version bigint, existing boolean, same boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  WITH existing AS (
    SELECT o.id, o.seq, o.version,
           (o.key, o.subject, o.type, o.source, o.content_type, o.data, o.headers)
             IS NOT DISTINCT FROM (p_key, p_subject, p_type, p_source, p_content_type, p_data, p_headers)
           AND (p_version IS NULL OR p_version = o.version) AS same
    FROM :SCHEMA.outbox o WHERE o.id = p_id
  ),
  -- The upsert holds the key's row lock until the caller commits: publishers
  -- of one key serialise, so version order is commit order.
  bump AS (
    INSERT INTO :SCHEMA.key_versions AS kv (key, version)
    SELECT p_key, coalesce(p_version, 1) WHERE NOT EXISTS (SELECT 1 FROM existing)
    ON CONFLICT (key) DO UPDATE
      SET version = CASE WHEN p_version IS NULL THEN kv.version + 1 ELSE greatest(kv.version, excluded.version) END
    RETURNING kv.version
  ),
  ins AS (
    INSERT INTO :SCHEMA.outbox AS o (id, key, version, subject, type, source, content_type, data, headers, occurred_at)
    SELECT p_id, p_key, coalesce(p_version, b.version), p_subject, p_type, p_source, p_content_type, p_data, p_headers, p_occurred_at
    FROM bump b
    RETURNING o.id, o.seq, o.version
  )
  SELECT i.id::text, i.seq, i.version, false, true FROM ins i
  UNION ALL
  SELECT e.id::text, e.seq, e.version, true, e.same FROM existing e
  UNION ALL
  SELECT NULL, NULL, NULL, false, pg_notify(p_channel, '')::text = ''
    FROM (SELECT 1) AS x WHERE p_channel IS NOT NULL AND EXISTS (SELECT 1 FROM ins);
END
$fn$;

-- A batch, in one statement. Every CTE is estimated at one row, so the
-- planner would join CTEs with nested loops (O(n²)): hence no joins between
-- them. Ids probe the unique index through = ANY, the new versions come back
-- as one map, and the caller matches results to inputs by id. Keys are
-- upserted in key order so two batches cannot deadlock on each other. A
-- conflict anywhere writes nothing.
CREATE FUNCTION :SCHEMA.publish_events(
  p_ids uuid[], p_keys text[], p_versions bigint[], p_subjects text[], p_types text[], p_sources text[],
  p_content_types text[], p_data bytea[], p_headers jsonb[], p_occurred_at timestamptz[], p_channel text
) RETURNS TABLE (id text, seq bigint, version bigint, existing boolean, same boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  WITH input AS (
    SELECT * FROM unnest(p_ids, p_keys, p_versions, p_subjects, p_types, p_sources, p_content_types, p_data, p_headers, p_occurred_at)
      WITH ORDINALITY AS t(id, key, version, subject, type, source, content_type, data, headers, occurred_at, ord)
  ),
  existing AS (
    SELECT o.id, o.seq, o.version,
           (o.key, o.subject, o.type, o.source, o.content_type, o.data, o.headers)
             IS NOT DISTINCT FROM (i.key, i.subject, i.type, i.source, i.content_type, i.data, i.headers)
           AND (i.version IS NULL OR i.version = o.version) AS same
    FROM :SCHEMA.outbox o JOIN input i ON i.id = o.id
    WHERE o.id = ANY (p_ids)
  ),
  fresh AS (
    SELECT i.*,
           row_number() OVER (PARTITION BY i.key ORDER BY i.ord) AS rank,
           count(*) OVER (PARTITION BY i.key) AS n
    FROM input i
    WHERE i.id <> ALL (ARRAY(SELECT e.id FROM existing e))
      AND NOT EXISTS (SELECT 1 FROM existing e WHERE NOT e.same)
  ),
  bump_auto AS (
    INSERT INTO :SCHEMA.key_versions AS kv (key, version)
    SELECT f.key, count(*) FROM fresh f WHERE f.version IS NULL GROUP BY f.key ORDER BY f.key
    ON CONFLICT (key) DO UPDATE SET version = kv.version + excluded.version
    RETURNING kv.key, kv.version
  ),
  bump_explicit AS (
    INSERT INTO :SCHEMA.key_versions AS kv (key, version)
    SELECT f.key, max(f.version) FROM fresh f WHERE f.version IS NOT NULL GROUP BY f.key ORDER BY f.key
    ON CONFLICT (key) DO UPDATE SET version = greatest(kv.version, excluded.version)
    RETURNING kv.key
  ),
  latest AS (SELECT coalesce(jsonb_object_agg(b.key, b.version), '{}'::jsonb) AS m FROM bump_auto b),
  ins AS (
    INSERT INTO :SCHEMA.outbox AS o (id, key, version, subject, type, source, content_type, data, headers, occurred_at)
    SELECT f.id, f.key, coalesce(f.version, (l.m ->> f.key)::bigint - f.n + f.rank), f.subject, f.type, f.source,
           f.content_type, f.data, f.headers, f.occurred_at
    FROM fresh f CROSS JOIN latest l
    ORDER BY f.ord
    RETURNING o.id, o.seq, o.version
  )
  SELECT i.id::text, i.seq, i.version, false, true FROM ins i
  UNION ALL
  SELECT e.id::text, e.seq, e.version, true, e.same FROM existing e
  UNION ALL
  SELECT NULL, NULL, NULL, false, pg_notify(p_channel, '')::text = ''
    FROM (SELECT 1) AS x WHERE p_channel IS NOT NULL AND EXISTS (SELECT 1 FROM ins);
END
$fn$;

-- Functions are executable by PUBLIC by default; these are not.
REVOKE ALL ON FUNCTION :SCHEMA.publish_event(uuid, text, bigint, text, text, text, text, bytea, jsonb, timestamptz, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION :SCHEMA.publish_events(uuid[], text[], bigint[], text[], text[], text[], text[], bytea[], jsonb[], timestamptz[], text) FROM PUBLIC;
