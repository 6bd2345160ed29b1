-- The limits the JS publisher enforces, enforced by the database for every
-- caller of the publish functions (issue 32). :SCHEMA is replaced by the
-- quoted schema name.
--
-- A role granted only EXECUTE on publish_event/publish_events used to be able
-- to (1) store an event of any size: a 280 MB row made every relay die on its
-- next claim, and again on every restart (pg-protocol cannot build a string
-- over 512 MiB from the row), so no key was ever published again; (2) store
-- one key's explicit versions out of order in one batch ([5, 4] was stored as
-- v5 then v4, and sent in that order), or mix given and generated versions of
-- one key in one batch (two upserts of one key_versions row in one statement,
-- whose outcome PostgreSQL does not define); (3) give a version of 2^63-1,
-- after which every publish of the key failed with "bigint out of range".
--
-- The rules, as the publisher (packages/core/src/validate.ts) states them:
-- - data is at most 64 MiB (67108864 bytes), the largest max_payload a NATS
--   server accepts; what is over the server's own max_payload goes dead at
--   the relay, which measures the row in SQL and does not load it;
-- - an explicit version is 1 … 2^62 (4611686018427387904), which leaves a key
--   2^62 generated versions after its largest explicit one;
-- - in one batch, a key's events either all give a version or none does, and
--   given versions increase in array order.
-- A refusal raises 22023 with COLUMN naming the field (as 000005's checks do,
-- which the publisher turns into a ValidationError); nothing is written.
--
-- Not a table CHECK: a NOT VALID check still applies to every UPDATE, so a
-- row stored before this migration could then never be marked dead or
-- published. Only the table's owner writes rows other than through these
-- functions; the relay role may update delivery columns only (--print-grants).
--
-- Cost: the common path gains one comparison per event (octet_length reads a
-- bytea's length word, not its bytes); the check function runs only for a
-- batch with versions or an event that fails.

CREATE FUNCTION :SCHEMA.publish_check_limits(p_single boolean, p_keys text[], p_versions bigint[], p_data bytea[])
RETURNS void LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_max_bytes constant bigint := 67108864;
  v_max_version constant bigint := 4611686018427387904;
  r record;
  v_field text;
BEGIN
  SELECT x.ord, x.key, x.version, x.bytes, x.prev, x.given, x.n
    INTO r
    FROM (
      SELECT t.ord, t.key, t.version, octet_length(t.data) AS bytes,
             lag(t.version) OVER (PARTITION BY t.key ORDER BY t.ord) AS prev,
             count(t.version) OVER (PARTITION BY t.key) AS given,
             count(*) OVER (PARTITION BY t.key) AS n
        FROM unnest(p_keys, p_versions, p_data) WITH ORDINALITY AS t(key, version, data, ord)
    ) x
   WHERE x.bytes > v_max_bytes
      OR x.version < 1 OR x.version > v_max_version
      OR x.version <= x.prev
      OR (x.given > 0 AND x.given < x.n)
   ORDER BY x.ord
   LIMIT 1;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  v_field := CASE WHEN p_single THEN '' ELSE format('events[%s].', r.ord - 1) END;
  IF r.bytes > v_max_bytes THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', COLUMN = v_field || 'data',
      MESSAGE = format('%sdata is %s bytes, over the outbox limit of %s bytes (64 MiB, the largest max_payload of a NATS server)',
                       v_field, r.bytes, v_max_bytes),
      HINT = 'store large payloads elsewhere (an object store) and publish a reference to them';
  END IF;
  IF r.version < 1 OR r.version > v_max_version THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', COLUMN = v_field || 'version',
      MESSAGE = format('%sversion must be from 1 to %s (2^62), got %s', v_field, v_max_version, r.version),
      HINT = 'give no version to take the key''s next one';
  END IF;
  IF r.version <= r.prev THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', COLUMN = v_field || 'version',
      MESSAGE = format('%sversion %s follows version %s of key %s in one batch', v_field, r.version, r.prev, to_json(left(r.key, 64))),
      HINT = 'give one key''s versions in increasing order';
  END IF;
  RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', COLUMN = v_field || 'version',
    MESSAGE = format('%sversion: key %s has events both with and without a version in one batch', v_field, to_json(left(r.key, 64))),
    HINT = 'give all of a key''s events in one batch a version, or none';
END
$fn$;
REVOKE ALL ON FUNCTION :SCHEMA.publish_check_limits(boolean, text[], bigint[], bytea[]) FROM PUBLIC;

-- 000008's entry functions get the limits as their first statement, and
-- keep the rest of their bodies as 000008 wrote them (taken from the catalog,
-- so nothing is restated here); CREATE OR REPLACE keeps a publishing role's
-- grants. The single event calls the check only when it fails; the batch
-- whenever it gives versions (their order is a property of the whole array).
DO $limits$
DECLARE
  v_event constant regprocedure := ':SCHEMA.publish_event(uuid, text, bigint, text, text, text, text, bytea, jsonb, timestamptz, text, boolean)'::regprocedure;
  v_events constant regprocedure := ':SCHEMA.publish_events(uuid[], text[], bigint[], text[], text[], text[], text[], bytea[], jsonb[], timestamptz[], text, boolean)'::regprocedure;
  v_def text;
BEGIN
  v_def := pg_get_functiondef(v_event);
  IF v_def !~ E'\n#variable_conflict use_column\nBEGIN\n' OR v_def ~ 'publish_check_limits' THEN
    RAISE EXCEPTION 'outbox migration 000009: % is not the function 000008 wrote; was it changed by hand?', v_event;
  END IF;
  EXECUTE regexp_replace(v_def, E'\n#variable_conflict use_column\nBEGIN\n',
    E'\n#variable_conflict use_column\nBEGIN\n'
    || E'  IF octet_length(p_data) > 67108864 OR p_version < 1 OR p_version > 4611686018427387904 THEN\n'
    || E'    PERFORM :SCHEMA.publish_check_limits(true, ARRAY[p_key], ARRAY[p_version], ARRAY[p_data]);\n'
    || E'  END IF;\n');
  v_def := pg_get_functiondef(v_events);
  IF v_def !~ E'\n#variable_conflict use_column\nBEGIN\n' OR v_def ~ 'publish_check_limits' THEN
    RAISE EXCEPTION 'outbox migration 000009: % is not the function 000008 wrote; was it changed by hand?', v_events;
  END IF;
  EXECUTE regexp_replace(v_def, E'\n#variable_conflict use_column\nBEGIN\n',
    E'\n#variable_conflict use_column\nBEGIN\n'
    || E'  IF cardinality(array_remove(p_versions, NULL)) > 0 OR (SELECT max(octet_length(d)) FROM unnest(p_data) AS d) > 67108864 THEN\n'
    || E'    PERFORM :SCHEMA.publish_check_limits(false, p_keys, p_versions, p_data);\n'
    || E'  END IF;\n');
END
$limits$;
