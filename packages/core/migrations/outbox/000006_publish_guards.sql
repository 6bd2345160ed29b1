-- The publish functions with 000005's input checks and issue 14's guards
-- (000005 only creates the checks, so the functions are redefined once). Each
-- function keeps its signature: the checks first, then a marked preamble, then
-- its 000003 statement unchanged, word for word. :SCHEMA is replaced by the
-- quoted schema name.
--
-- Preamble (version guard): an explicit version must be above the key's
-- recorded one (key_versions, which is never pruned). Before, v1, v5, v3 were
-- stored in that order, and a pruned version could be stored again: a
-- `latest` inbox dropped the late v3 and a `sequential` one waited forever.
-- The refusal is a result row, not an exception, so the caller's transaction
-- stays usable: id, seq NULL, version = the recorded one, existing false,
-- same false; nothing is written. The key's row is created (at version 0,
-- "none handed out") and locked first, so a concurrent publisher of the same
-- key is waited for and its committed version is the one compared.
-- Ids that already exist skip the guard: a retried publish stays `existing`.
--
-- Preamble (ids recognised after prune): the prune job (apps/relay
-- sql/prune-published.ts) moves what recognises a published event into
-- published_ids as it deletes the row: its id, seq, version and a digest of
-- its content, not the payload. The job keeps each entry for another
-- retention, so an id stays recognised for at least the outbox retention
-- after its row is gone. A caller-supplied id found there returns that event
-- as `existing` (same = the digest and version match), and nothing is
-- written. Before, a re-publish after the prune stored it again at a new
-- version, which the stream stored again past its duplicate window and
-- `latest`/`sequential` inboxes applied again. The preamble first takes a
-- KEY SHARE lock on the stored row, so a prune deleting it concurrently is
-- waited for and its entry is seen.

CREATE TABLE :SCHEMA.published_ids (
  id        uuid PRIMARY KEY,
  seq       bigint NOT NULL,
  version   bigint NOT NULL,
  -- event_digest() of the pruned row: enough to tell the same event from another with this id.
  digest    bytea NOT NULL,
  pruned_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX published_ids_pruned_at_idx ON :SCHEMA.published_ids (pruned_at);

-- The content the publish functions compare for an existing id (key, subject,
-- type, source, content type, headers, data), hashed: the JSON array text is
-- self-delimiting, so no two contents share the hashed bytes.
CREATE FUNCTION :SCHEMA.event_digest(
  p_key text, p_subject text, p_type text, p_source text, p_content_type text, p_data bytea, p_headers jsonb
) RETURNS bytea LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT sha256(convert_to(jsonb_build_array(p_key, p_subject, p_type, p_source, p_content_type, p_headers)::text, 'UTF8') || p_data)
$fn$;

CREATE OR REPLACE FUNCTION :SCHEMA.publish_event(
  p_id uuid, p_key text, p_version bigint, p_subject text, p_type text, p_source text,
  p_content_type text, p_data bytea, p_headers jsonb, p_occurred_at timestamptz, p_channel text, p_check boolean
) RETURNS TABLE (id text, seq bigint, version bigint, existing boolean, same boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET enable_seqscan = off AS $fn$
#variable_conflict use_column
DECLARE
  v_recorded bigint;
BEGIN
  -- 000005's checks first (reserved headers, subjects, control characters, lengths).
  IF NOT :SCHEMA.publish_events_ok(ARRAY[p_key], ARRAY[p_subject], ARRAY[p_type], ARRAY[p_source], ARRAY[p_content_type], ARRAY[p_headers]) THEN
    PERFORM :SCHEMA.publish_check_event('', p_key, p_subject, p_type, p_source, p_content_type, p_headers);
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', COLUMN = 'event', MESSAGE = 'the event failed the publish checks';
  END IF;
  -- >>> 000006 preamble: ids recognised after prune
  IF p_check THEN
    PERFORM 1 FROM :SCHEMA.outbox o WHERE o.id = p_id FOR KEY SHARE;
    RETURN QUERY
    SELECT t.id::text, t.seq, t.version, true,
           t.digest = :SCHEMA.event_digest(p_key, p_subject, p_type, p_source, p_content_type, p_data, p_headers)
           AND (p_version IS NULL OR p_version = t.version)
      FROM :SCHEMA.published_ids t WHERE t.id = p_id;
    IF FOUND THEN
      RETURN;
    END IF;
  END IF;
  -- version guard
  IF p_version IS NOT NULL AND NOT (p_check AND EXISTS (SELECT 1 FROM :SCHEMA.outbox o WHERE o.id = p_id)) THEN
    INSERT INTO :SCHEMA.key_versions AS kv (key, version) VALUES (p_key, 0) ON CONFLICT (key) DO NOTHING;
    SELECT kv.version INTO v_recorded FROM :SCHEMA.key_versions kv WHERE kv.key = p_key FOR UPDATE;
    IF v_recorded >= p_version THEN
      RETURN QUERY SELECT p_id::text, NULL::bigint, v_recorded, false, false;
      RETURN;
    END IF;
  END IF;
  -- <<< 000006 preamble; below: the 000003 statement, unchanged
  RETURN QUERY
  WITH existing AS (
    SELECT o.id, o.seq, o.version,
           (o.key, o.subject, o.type, o.source, o.content_type, o.data, o.headers)
             IS NOT DISTINCT FROM (p_key, p_subject, p_type, p_source, p_content_type, p_data, p_headers)
           AND (p_version IS NULL OR p_version = o.version) AS same
    FROM :SCHEMA.outbox o WHERE p_check AND o.id = p_id
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

-- The batch: the same guard for every new row with a version (the publisher
-- has already refused versions that do not increase within one call). Any
-- refusal writes nothing for the whole batch, like a conflict.
CREATE OR REPLACE FUNCTION :SCHEMA.publish_events(
  p_ids uuid[], p_keys text[], p_versions bigint[], p_subjects text[], p_types text[], p_sources text[],
  p_content_types text[], p_data bytea[], p_headers jsonb[], p_occurred_at timestamptz[], p_channel text, p_check boolean
) RETURNS TABLE (id text, seq bigint, version bigint, existing boolean, same boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET enable_seqscan = off AS $fn$
#variable_conflict use_column
DECLARE
  v_keys text[];
  v_conflict boolean;
BEGIN
  -- 000005's checks first (reserved headers, subjects, control characters, lengths).
  IF NOT :SCHEMA.publish_events_ok(p_keys, p_subjects, p_types, p_sources, p_content_types, p_headers) THEN
    FOR i IN 1 .. coalesce(array_length(p_ids, 1), 0) LOOP
      PERFORM :SCHEMA.publish_check_event(format('events[%s].', i - 1), p_keys[i], p_subjects[i], p_types[i], p_sources[i],
                                          p_content_types[i], p_headers[i]);
    END LOOP;
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', COLUMN = 'events', MESSAGE = 'an event failed the publish checks';
  END IF;
  -- >>> 000006 preamble: ids recognised after prune
  IF p_check THEN
    PERFORM 1 FROM :SCHEMA.outbox o WHERE o.id = ANY (p_ids) ORDER BY o.id FOR KEY SHARE;
    IF EXISTS (SELECT 1 FROM :SCHEMA.published_ids t WHERE t.id = ANY (p_ids)) THEN
      RETURN QUERY
      SELECT r.id::text, r.seq, r.version, true, r.same FROM (
        SELECT t.id, t.seq, t.version,
               t.digest = :SCHEMA.event_digest(g.key, g.subject, g.type, g.source, g.content_type, g.data, g.headers)
               AND (g.version IS NULL OR g.version = t.version) AS same
          FROM unnest(p_ids, p_keys, p_versions, p_subjects, p_types, p_sources, p_content_types, p_data, p_headers)
                 AS g(id, key, version, subject, type, source, content_type, data, headers)
          JOIN :SCHEMA.published_ids t ON t.id = g.id
      ) r;
      -- (the rows just returned, asked again: this path runs only for ids published again after a prune)
      SELECT bool_or(t.digest IS DISTINCT FROM :SCHEMA.event_digest(g.key, g.subject, g.type, g.source, g.content_type, g.data, g.headers)
                     OR (g.version IS NOT NULL AND g.version <> t.version))
        INTO v_conflict
        FROM unnest(p_ids, p_keys, p_versions, p_subjects, p_types, p_sources, p_content_types, p_data, p_headers)
               AS g(id, key, version, subject, type, source, content_type, data, headers)
        JOIN :SCHEMA.published_ids t ON t.id = g.id;
      IF v_conflict THEN
        RETURN; -- a conflict writes nothing, as the statement below does for stored rows
      END IF;
      -- The rest of the batch goes on without the recognised events.
      SELECT array_agg(g.id ORDER BY g.ord), array_agg(g.key ORDER BY g.ord), array_agg(g.version ORDER BY g.ord),
             array_agg(g.subject ORDER BY g.ord), array_agg(g.type ORDER BY g.ord), array_agg(g.source ORDER BY g.ord),
             array_agg(g.content_type ORDER BY g.ord), array_agg(g.data ORDER BY g.ord), array_agg(g.headers ORDER BY g.ord),
             array_agg(g.occurred_at ORDER BY g.ord)
        INTO p_ids, p_keys, p_versions, p_subjects, p_types, p_sources, p_content_types, p_data, p_headers, p_occurred_at
        FROM unnest(p_ids, p_keys, p_versions, p_subjects, p_types, p_sources, p_content_types, p_data, p_headers, p_occurred_at)
               WITH ORDINALITY AS g(id, key, version, subject, type, source, content_type, data, headers, occurred_at, ord)
       WHERE NOT EXISTS (SELECT 1 FROM :SCHEMA.published_ids t WHERE t.id = g.id);
      IF p_ids IS NULL THEN
        RETURN;
      END IF;
    END IF;
  END IF;
  -- version guard
  SELECT array_agg(DISTINCT g.key ORDER BY g.key) INTO v_keys
    FROM unnest(p_ids, p_keys, p_versions) AS g(id, key, version)
   WHERE g.version IS NOT NULL AND NOT (p_check AND EXISTS (SELECT 1 FROM :SCHEMA.outbox o WHERE o.id = g.id));
  IF v_keys IS NOT NULL THEN
    INSERT INTO :SCHEMA.key_versions AS kv (key, version)
    SELECT k, 0 FROM unnest(v_keys) AS k ORDER BY k ON CONFLICT (key) DO NOTHING;
    RETURN QUERY
    WITH recorded AS (
      SELECT kv.key, kv.version FROM :SCHEMA.key_versions kv WHERE kv.key = ANY (v_keys) ORDER BY kv.key FOR UPDATE
    )
    SELECT g.id::text, NULL::bigint, r.version, false, false
      FROM unnest(p_ids, p_keys, p_versions) AS g(id, key, version) JOIN recorded r ON r.key = g.key
     WHERE g.version IS NOT NULL AND g.version <= r.version
       AND NOT (p_check AND EXISTS (SELECT 1 FROM :SCHEMA.outbox o WHERE o.id = g.id));
    IF FOUND THEN
      RETURN;
    END IF;
  END IF;
  -- <<< 000006 preamble; below: the 000003 statement, unchanged
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
    WHERE p_check AND o.id = ANY (p_ids)
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

-- The outbox's one retention (issue 14): the prune job reads it at every run,
-- whichever relay instance runs it; relays used to prune by their own
-- --retention, so one started with 0ms deleted every published row. Changed
-- with `ferry migrate --retention`.
INSERT INTO :SCHEMA.settings (name, value) VALUES ('retention_ms', '604800000') ON CONFLICT (name) DO NOTHING;
