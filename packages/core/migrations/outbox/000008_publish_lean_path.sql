-- The publish path's common case, made cheap (issue 15). :SCHEMA is replaced
-- by the quoted schema name.
--
-- What a publish transaction paid, measured on the backend (pgbench, 8
-- clients, business UPDATE + one event, CPU per transaction): the insert and
-- the version upsert written as one plain statement ~210 µs; the same
-- statement inside the PL/pgSQL function ~220 µs; plus the check called as
-- publish_events_ok on one-element arrays ~280 µs (a subquery over unnest,
-- executor set up again in every transaction); the whole 000006/000007
-- function ~315 µs (its id-check and version-guard branches are planned and
-- started in every call, though the publisher's own calls skip them). A plain
-- INSERT of the same JSON: ~160 µs.
--
-- 1. The rules as a per-event function, publish_event_ok, taken from
--    publish_events_ok's stored body (000005's rule text; 000007 made it
--    PL/pgSQL), so the rules stay written once: the per-event expression is
--    cut out and its `t.` columns become parameters; the header rules (a
--    subquery over jsonb_each) become publish_headers_ok, called only for
--    non-empty headers. publish_event_ok is LANGUAGE sql with no SET clause so
--    that PostgreSQL inlines it into its callers (which run with search_path
--    pg_catalog, pg_temp); in publish_event it is then one plain expression,
--    which PL/pgSQL evaluates without starting an executor.
--    publish_events_ok is redefined to call it: the same rules, in one place.
--
-- 2. publish_event and publish_events take a short path when the publisher
--    generated the ids (p_check false) and every key's next version is wanted
--    (no version given): the version upsert and the insert, nothing else (what
--    000003's statements do on that path). Any other call goes on to the
--    000006/000007 function, renamed publish_event_full/publish_events_full:
--    ids recognised after prune, the version guard and conflicts behave
--    exactly as before, and so does an event that fails the checks (the old
--    function raises the precise error). On the short path the NOTIFY is a statement of its own
--    instead of an extra result row (the publisher skips that row either way).
DO $lean$
DECLARE
  v_ok constant regprocedure := ':SCHEMA.publish_events_ok(text[], text[], text[], text[], text[], jsonb[])'::regprocedure;
  v_event constant regprocedure := ':SCHEMA.publish_event(uuid, text, bigint, text, text, text, text, bytea, jsonb, timestamptz, text, boolean)'::regprocedure;
  v_events constant regprocedure := ':SCHEMA.publish_events(uuid[], text[], bigint[], text[], text[], text[], text[], bytea[], jsonb[], timestamptz[], text, boolean)'::regprocedure;
  v_src text;
  v_rules text;
  v_headers text;
  v_def text;
BEGIN
  -- 000007's publish_events_ok: BEGIN RETURN NOT EXISTS (SELECT 1 FROM unnest(...) AS t(k, su, ty, so, ct, h) WHERE NOT <rules>); END
  SELECT prosrc INTO v_src FROM pg_catalog.pg_proc WHERE oid = v_ok;
  v_rules := substring(v_src FROM '^\s*BEGIN\s+RETURN NOT EXISTS \(\s*SELECT 1 FROM unnest\([^)]*\) AS t\(k, su, ty, so, ct, h\)\s+WHERE NOT\s+(coalesce\(.*\))\s*\)\s*;\s*END\s*$');
  v_headers := substring(v_rules FROM '\(\s*SELECT count\(\*\) <= 64 .* FROM jsonb_each\(t\.h\) AS h\)');
  IF v_rules IS NULL OR v_headers IS NULL THEN
    RAISE EXCEPTION 'outbox migration 000008: % is not the check 000007 wrote; was it changed by hand?', v_ok;
  END IF;

  EXECUTE format(
    'CREATE FUNCTION :SCHEMA.publish_headers_ok(p_h jsonb) RETURNS boolean LANGUAGE plpgsql IMMUTABLE '
    'SET search_path = pg_catalog, pg_temp AS %L',
    E'\nBEGIN\n  RETURN ' || replace(v_headers, 't.h', 'p_h') || E';\nEND\n');
  EXECUTE format(
    'CREATE FUNCTION :SCHEMA.publish_event_ok(p_k text, p_su text, p_ty text, p_so text, p_ct text, p_h jsonb) '
    'RETURNS boolean LANGUAGE sql IMMUTABLE AS %L',
    E'\n  SELECT ' || regexp_replace(replace(v_rules, v_headers, ':SCHEMA.publish_headers_ok(t.h)'), '\mt\.(k|su|ty|so|ct|h)\M', 'p_\1', 'g') || E'\n');
  EXECUTE format(
    'CREATE OR REPLACE FUNCTION :SCHEMA.publish_events_ok(p_keys text[], p_subjects text[], p_types text[], p_sources text[], '
    'p_content_types text[], p_headers jsonb[]) RETURNS boolean LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS %L',
    E'\nBEGIN\n  RETURN NOT EXISTS (\n    SELECT 1 FROM unnest(p_keys, p_subjects, p_types, p_sources, p_content_types, p_headers) AS t(k, su, ty, so, ct, h)\n'
    || E'    WHERE NOT :SCHEMA.publish_event_ok(t.k, t.su, t.ty, t.so, t.ct, t.h)\n  );\nEND\n');

  -- The whole functions, as they are, under new names.
  v_def := pg_get_functiondef(v_event);
  IF v_def !~ '^CREATE OR REPLACE FUNCTION [^(]*\.publish_event\(' THEN
    RAISE EXCEPTION 'outbox migration 000008: unexpected definition of %', v_event;
  END IF;
  EXECUTE regexp_replace(v_def, '\.publish_event\(', '.publish_event_full(');
  v_def := pg_get_functiondef(v_events);
  IF v_def !~ '^CREATE OR REPLACE FUNCTION [^(]*\.publish_events\(' THEN
    RAISE EXCEPTION 'outbox migration 000008: unexpected definition of %', v_events;
  END IF;
  EXECUTE regexp_replace(v_def, '\.publish_events\(', '.publish_events_full(');
END
$lean$;

REVOKE ALL ON FUNCTION :SCHEMA.publish_headers_ok(jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION :SCHEMA.publish_event_ok(text, text, text, text, text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION :SCHEMA.publish_event_full(uuid, text, bigint, text, text, text, text, bytea, jsonb, timestamptz, text, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION :SCHEMA.publish_events_full(uuid[], text[], bigint[], text[], text[], text[], text[], bytea[], jsonb[], timestamptz[], text, boolean) FROM PUBLIC;

-- CREATE OR REPLACE keeps the grants a publishing role was given.
CREATE OR REPLACE FUNCTION :SCHEMA.publish_event(
  p_id uuid, p_key text, p_version bigint, p_subject text, p_type text, p_source text,
  p_content_type text, p_data bytea, p_headers jsonb, p_occurred_at timestamptz, p_channel text, p_check boolean
) RETURNS TABLE (id text, seq bigint, version bigint, existing boolean, same boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET enable_seqscan = off AS $fn$
#variable_conflict use_column
BEGIN
  -- An event that fails the checks goes the long way too: the old function raises the precise error.
  IF p_check OR p_version IS NOT NULL
     OR NOT :SCHEMA.publish_event_ok(p_key, p_subject, p_type, p_source, p_content_type, p_headers) THEN
    RETURN QUERY SELECT * FROM :SCHEMA.publish_event_full(p_id, p_key, p_version, p_subject, p_type, p_source,
                                                          p_content_type, p_data, p_headers, p_occurred_at, p_channel, p_check);
    RETURN;
  END IF;
  -- The upsert holds the key's row lock until the caller commits: publishers
  -- of one key serialise, so version order is commit order.
  RETURN QUERY
  WITH bump AS (
    INSERT INTO :SCHEMA.key_versions AS kv (key, version) VALUES (p_key, 1)
    ON CONFLICT (key) DO UPDATE SET version = kv.version + 1
    RETURNING kv.version
  ),
  ins AS (
    INSERT INTO :SCHEMA.outbox AS o (id, key, version, subject, type, source, content_type, data, headers, occurred_at)
    SELECT p_id, p_key, b.version, p_subject, p_type, p_source, p_content_type, p_data, p_headers, p_occurred_at
    FROM bump b
    RETURNING o.id, o.seq, o.version
  )
  SELECT i.id::text, i.seq, i.version, false, true FROM ins i;
  IF p_channel IS NOT NULL AND EXISTS (SELECT 1 FROM :SCHEMA.relay_waiting w WHERE w.until > now()) THEN
    PERFORM pg_notify(p_channel, '');
  END IF;
END
$fn$;

-- The batch. A key's events get the versions after its recorded one, in
-- array order, and are inserted in array order (so seq order is version
-- order); the upsert locks the keys in key order, as 000003's does.
CREATE OR REPLACE FUNCTION :SCHEMA.publish_events(
  p_ids uuid[], p_keys text[], p_versions bigint[], p_subjects text[], p_types text[], p_sources text[],
  p_content_types text[], p_data bytea[], p_headers jsonb[], p_occurred_at timestamptz[], p_channel text, p_check boolean
) RETURNS TABLE (id text, seq bigint, version bigint, existing boolean, same boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET enable_seqscan = off AS $fn$
#variable_conflict use_column
BEGIN
  IF p_check OR cardinality(array_remove(p_versions, NULL)) > 0
     OR NOT :SCHEMA.publish_events_ok(p_keys, p_subjects, p_types, p_sources, p_content_types, p_headers) THEN
    RETURN QUERY SELECT * FROM :SCHEMA.publish_events_full(p_ids, p_keys, p_versions, p_subjects, p_types, p_sources,
                                                           p_content_types, p_data, p_headers, p_occurred_at, p_channel, p_check);
    RETURN;
  END IF;
  RETURN QUERY
  WITH input AS (
    SELECT t.*, row_number() OVER (PARTITION BY t.key ORDER BY t.ord) AS rank, count(*) OVER (PARTITION BY t.key) AS n
    FROM unnest(p_ids, p_keys, p_subjects, p_types, p_sources, p_content_types, p_data, p_headers, p_occurred_at)
           WITH ORDINALITY AS t(id, key, subject, type, source, content_type, data, headers, occurred_at, ord)
  ),
  bump AS (
    INSERT INTO :SCHEMA.key_versions AS kv (key, version)
    SELECT i.key, count(*) FROM input i GROUP BY i.key ORDER BY i.key
    ON CONFLICT (key) DO UPDATE SET version = kv.version + excluded.version
    RETURNING kv.key, kv.version
  ),
  ins AS (
    INSERT INTO :SCHEMA.outbox AS o (id, key, version, subject, type, source, content_type, data, headers, occurred_at)
    SELECT i.id, i.key, b.version - i.n + i.rank, i.subject, i.type, i.source, i.content_type, i.data, i.headers, i.occurred_at
    FROM input i JOIN bump b ON b.key = i.key
    ORDER BY i.ord
    RETURNING o.id, o.seq, o.version
  )
  SELECT i.id::text, i.seq, i.version, false, true FROM ins i;
  IF p_channel IS NOT NULL AND EXISTS (SELECT 1 FROM :SCHEMA.relay_waiting w WHERE w.until > now()) THEN
    PERFORM pg_notify(p_channel, '');
  END IF;
END
$fn$;
