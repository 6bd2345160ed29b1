-- The publish path's two costs that issue 15 measured, and the wake-up the
-- relay gets by default. :SCHEMA is replaced by the quoted schema name.
--
-- 1. publish_events_ok (000005) becomes PL/pgSQL, its rule text unchanged.
--    As a LANGUAGE sql function called from PL/pgSQL it was parsed and
--    planned again in every transaction (a SQL function's cached state lives
--    in the calling expression's per-transaction state): backend CPU per
--    publish transaction 535 µs against 320 µs without the check. A PL/pgSQL
--    function keeps its statement's plan for the session: 400 µs
--    (bench/scenarios/publish-profile.ts; plain insert 240 µs).
--
-- 2. NOTIFY only when a relay waits for it. The relay LISTENs and polls; when
--    its polls find nothing it records itself in relay_waiting (until a time
--    a little past its next refresh, so a relay that dies stops being waited
--    for by itself), and deletes the row when it finds rows again. The
--    publish functions send their NOTIFY (still only when the caller asked,
--    p_channel not null) only while some relay waits: a busy relay, which
--    polls again within milliseconds anyway, costs its publishers no NOTIFY
--    (a NOTIFY serialises committing transactions on a global queue lock),
--    and an idle one is woken at commit. This is what lets the publisher's
--    `notify` default to true. A relay older than this migration never
--    writes relay_waiting, so its publishers send no NOTIFY and it polls.
CREATE TABLE :SCHEMA.relay_waiting (
  instance text PRIMARY KEY,
  until    timestamptz NOT NULL
);
-- The publish functions run with enable_seqscan off: without an index on
-- until, their probe of this (tiny) table was a disabled seq scan whose cost
-- (1e10) set off JIT compilation, 50-200 ms a publish.
CREATE INDEX relay_waiting_until_idx ON :SCHEMA.relay_waiting (until);

-- publish_events_ok as PL/pgSQL, rewritten from its own stored body so the
-- rules stay written once (000005): `SELECT <expr>` becomes
-- `BEGIN RETURN <expr>; END`. Refuses to run unless the body is the one
-- 000005 wrote.
DO $ok$
DECLARE
  v_fn constant regprocedure := ':SCHEMA.publish_events_ok(text[], text[], text[], text[], text[], jsonb[])'::regprocedure;
  v_src text;
BEGIN
  SELECT prosrc INTO v_src FROM pg_catalog.pg_proc WHERE oid = v_fn AND prolang = (SELECT oid FROM pg_catalog.pg_language WHERE lanname = 'sql');
  IF v_src IS NULL OR v_src !~ '^\s*SELECT NOT EXISTS \(' THEN
    RAISE EXCEPTION 'outbox migration 000007: % is not the LANGUAGE sql check 000005 created; was it changed by hand?', v_fn;
  END IF;
  EXECUTE format(
    'CREATE OR REPLACE FUNCTION :SCHEMA.publish_events_ok(p_keys text[], p_subjects text[], p_types text[], p_sources text[], '
    'p_content_types text[], p_headers jsonb[]) RETURNS boolean LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS %L',
    regexp_replace(v_src, '^\s*SELECT ', E'\nBEGIN\n  RETURN ') || E';\nEND\n');
END
$ok$;

-- The NOTIFY condition, patched into 000006's definitions in place: the one
-- line below is the only change, so the functions are not written out a
-- third time. The patch refuses to run unless it matches exactly once in each.
DO $patch$
DECLARE
  v_fn text;
  v_def text;
  v_old constant text := 'WHERE p_channel IS NOT NULL AND EXISTS (SELECT 1 FROM ins)';
  v_new constant text := 'WHERE p_channel IS NOT NULL AND EXISTS (SELECT 1 FROM ins) '
                         || 'AND EXISTS (SELECT 1 FROM :SCHEMA.relay_waiting w WHERE w.until > now())';
BEGIN
  FOREACH v_fn IN ARRAY ARRAY[
    ':SCHEMA.publish_event(uuid, text, bigint, text, text, text, text, bytea, jsonb, timestamptz, text, boolean)',
    ':SCHEMA.publish_events(uuid[], text[], bigint[], text[], text[], text[], text[], bytea[], jsonb[], timestamptz[], text, boolean)'
  ] LOOP
    v_def := pg_get_functiondef(v_fn::regprocedure);
    IF (length(v_def) - length(replace(v_def, v_old, ''))) / length(v_old) <> 1 THEN
      RAISE EXCEPTION 'outbox migration 000007: % does not hold its NOTIFY condition exactly once; was it changed by hand?', v_fn;
    END IF;
    EXECUTE replace(v_def, v_old, v_new);
  END LOOP;
END
$patch$;
