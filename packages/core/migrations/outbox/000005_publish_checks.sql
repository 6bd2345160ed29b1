-- The publish functions refuse, with a clear error, what the relay could
-- never send or must never trust: a row that passed them reaches the stream
-- as written, so nothing is left for the relay to retry 25 times and then
-- dead-letter (issue 13). The publisher checks the same rules before any SQL
-- (packages/core/src/validate.ts); these checks are for every other caller of
-- the functions, such as a least-privileged role calling them by hand:
-- - reserved header names (ce-*, Nats-*, Content-Type, in any case): the relay
--   writes those from the row's own columns, and a stored one could otherwise
--   forge the key, version, type or message id of the event on the wire;
-- - a subject that is not a NATS publish subject (empty token, space,
--   wildcard, control character);
-- - CR, LF or another control character in anything that travels in a header
--   (key, type, source, content type, header values), and values over the
--   publisher's limits.
-- Errors are SQLSTATE 22023 (invalid_parameter_value) with COLUMN set to the
-- field at fault (e.g. "headers.ce-type" or "events[3].subject"); the
-- publisher turns them into a ValidationError on that field.
-- The checks live in helper functions; publish_event/publish_events call them
-- in the one IF block each starts with (publish_events_ok, then
-- publish_check_event to raise the precise error). The functions themselves
-- are redefined once, with these checks and issue 14's guards, in 000006.
-- :SCHEMA is replaced by the quoted schema name.

-- The rules, spelled as the publisher's (packages/core/src/validate.ts) so that
-- the functions never refuse what the publisher accepts: control characters
-- are U+0001-U+001F and U+007F (a header value may hold a tab), whitespace is
-- JavaScript's (what String.prototype.trim removes), a header name is an HTTP
-- token. [[:cntrl:]] and [[:space:]] are not used: with a UTF-8 locale they
-- also match U+0085, which the publisher accepts. Edge whitespace is found
-- with btrim() and the header name's length with char_length(): as regular
-- expressions (a bounded repeat, a 20-character class at both ends) they cost
-- 15-20 µs an event, which a batch of 10,000 would pay 10,000 times.

-- True when every event of a batch passes every check: one set-based
-- statement per call, one call per publish statement (publish_event passes
-- one-element arrays), so a batch of 10,000 costs no PL/pgSQL call per event.
-- Only when it is false does publish_check_event run, event by event, to
-- raise the precise error.
CREATE OR REPLACE FUNCTION :SCHEMA.publish_events_ok(
  p_keys text[], p_subjects text[], p_types text[], p_sources text[], p_content_types text[], p_headers jsonb[]
) RETURNS boolean LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT NOT EXISTS (
    SELECT 1 FROM unnest(p_keys, p_subjects, p_types, p_sources, p_content_types, p_headers) AS t(k, su, ty, so, ct, h)
    WHERE NOT
      coalesce(
          char_length(t.k) BETWEEN 1 AND 256 AND t.k !~ '[\x01-\x1f\x7f]' AND btrim(t.k, E'\t\n\u000b\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff') = t.k
          AND char_length(t.ty) BETWEEN 1 AND 256 AND t.ty !~ '[\x01-\x1f\x7f]' AND btrim(t.ty, E'\t\n\u000b\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff') = t.ty
          AND char_length(t.so) BETWEEN 1 AND 1024 AND t.so !~ '[\x01-\x1f\x7f]' AND btrim(t.so, E'\t\n\u000b\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff') = t.so
          AND char_length(t.ct) BETWEEN 1 AND 1024 AND t.ct !~ '[\x01-\x08\x0a-\x1f\x7f]'
          AND char_length(t.su) BETWEEN 1 AND 1024
          AND t.su ~ '^[^\t\n\u000b\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff\x01-\x1f\x7f.*>]+(\.[^\t\n\u000b\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff\x01-\x1f\x7f.*>]+)*$'
          AND (t.h IS NULL OR t.h = '{}'::jsonb OR (jsonb_typeof(t.h) = 'object' AND (
            SELECT count(*) <= 64 AND count(DISTINCT lower(h.key)) = count(*) AND coalesce(bool_and(
                     h.key ~ '^[-!#$%&''*+.^_`|~0-9A-Za-z]+$' AND char_length(h.key) <= 128 AND h.key !~* '^(ce-|nats-)|^content-type$'
                     AND jsonb_typeof(h.value) = 'string' AND char_length(h.value #>> '{}') <= 4096
                     AND (h.value #>> '{}') !~ '[\x01-\x08\x0a-\x1f\x7f]' AND btrim((h.value #>> '{}'), E'\t\n\u000b\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff') = (h.value #>> '{}')), true)
              FROM jsonb_each(t.h) AS h))),
          false)
  )
$fn$;

-- Raises 22023 naming the field, the value (shortened) and the rule. p_kind:
-- 'text' (key, type, source: non-empty, no control character, no edge
-- whitespace), 'header' (a header value: may be empty or hold a tab),
-- 'content-type' (non-empty, may hold a tab or end in spaces).
CREATE OR REPLACE FUNCTION :SCHEMA.publish_check_text(p_field text, p_value text, p_max integer, p_kind text)
RETURNS void LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_shown text := left(to_json(p_value)::text, 80);
BEGIN
  IF p_value IS NULL OR (p_value = '' AND p_kind <> 'header') THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', COLUMN = p_field,
      MESSAGE = format('%s must be a non-empty string', p_field);
  END IF;
  IF char_length(p_value) > p_max THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', COLUMN = p_field,
      MESSAGE = format('%s %s is %s characters; the limit is %s', p_field, v_shown, char_length(p_value), p_max);
  END IF;
  -- CR or LF would split the header it travels in; no other control character belongs there either.
  IF (p_kind = 'text' AND p_value ~ '[\x01-\x1f\x7f]') OR (p_kind <> 'text' AND p_value ~ '[\x01-\x08\x0a-\x1f\x7f]') THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', COLUMN = p_field,
      MESSAGE = format('%s %s contains a control character (CR, LF, …); remove it', p_field, v_shown);
  END IF;
  IF p_kind <> 'content-type' AND btrim(p_value, E'\t\n\u000b\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff') <> p_value THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', COLUMN = p_field,
      MESSAGE = format('%s %s starts or ends with whitespace, which NATS headers do not carry; trim it', p_field, v_shown);
  END IF;
END
$fn$;

-- One event's fields, raising on the first that fails; p_prefix is '' for
-- publish_event and 'events[i].' for publish_events.
CREATE OR REPLACE FUNCTION :SCHEMA.publish_check_event(
  p_prefix text, p_key text, p_subject text, p_type text, p_source text, p_content_type text, p_headers jsonb
) RETURNS void LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_field text;
  v_name text;
  v_value jsonb;
  v_seen text[] := '{}';
BEGIN
  PERFORM :SCHEMA.publish_check_text(p_prefix || 'key', p_key, 256, 'text');
  PERFORM :SCHEMA.publish_check_text(p_prefix || 'type', p_type, 256, 'text');
  PERFORM :SCHEMA.publish_check_text(p_prefix || 'source', p_source, 1024, 'text');
  PERFORM :SCHEMA.publish_check_text(p_prefix || 'contentType', p_content_type, 1024, 'content-type');
  PERFORM :SCHEMA.publish_check_text(p_prefix || 'subject', p_subject, 1024, 'content-type'); -- its own rule follows
  IF p_subject !~ '^[^\t\n\u000b\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff\x01-\x1f\x7f.*>]+(\.[^\t\n\u000b\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff\x01-\x1f\x7f.*>]+)*$' THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', COLUMN = p_prefix || 'subject',
      MESSAGE = format('%ssubject %s is not a valid NATS publish subject: use dot-separated tokens with no spaces, '
                       'no empty tokens and no wildcards (* or >), e.g. "orders.placed"', p_prefix, left(to_json(p_subject)::text, 80));
  END IF;
  IF p_headers IS NULL THEN
    RETURN;
  END IF;
  IF jsonb_typeof(p_headers) <> 'object' THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', COLUMN = p_prefix || 'headers',
      MESSAGE = format('%sheaders must be a JSON object of string values, got %s', p_prefix, left(p_headers::text, 80));
  END IF;
  FOR v_name, v_value IN SELECT h.key, h.value FROM jsonb_each(p_headers) AS h LOOP
    v_field := p_prefix || 'headers.' || left(v_name, 128);
    IF cardinality(v_seen) >= 64 THEN
      RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', COLUMN = p_prefix || 'headers',
        MESSAGE = format('%sheaders has more than 64 entries; the limit is 64', p_prefix);
    END IF;
    IF v_name !~ '^[-!#$%&''*+.^_`|~0-9A-Za-z]+$' OR char_length(v_name) > 128 THEN
      RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', COLUMN = v_field,
        MESSAGE = format('header name %s is not a valid header token (letters, digits and !#$%%&''*+-.^_`|~, at most 128 characters)',
                         left(to_json(v_name)::text, 80));
    END IF;
    IF v_name ~* '^(ce-|nats-)|^content-type$' THEN
      RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', COLUMN = v_field,
        MESSAGE = format('header %s is reserved: Ferry sets ce-*, Nats-* and Content-Type itself from the event''s own fields; '
                         'pass the value as an event field or rename the header', to_json(v_name)::text);
    END IF;
    IF lower(v_name) = ANY (v_seen) THEN
      RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', COLUMN = v_field,
        MESSAGE = format('header %s is given twice (names are case-insensitive)', to_json(v_name)::text);
    END IF;
    v_seen := v_seen || lower(v_name);
    IF jsonb_typeof(v_value) <> 'string' THEN
      RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', COLUMN = v_field,
        MESSAGE = format('header %s must be a string, got %s', to_json(v_name)::text, left(v_value::text, 80));
    END IF;
    PERFORM :SCHEMA.publish_check_text(v_field, v_value #>> '{}', 4096, 'header');
  END LOOP;
END
$fn$;

-- Only the publish functions (SECURITY DEFINER, as the owner) need the checks.
REVOKE ALL ON FUNCTION :SCHEMA.publish_events_ok(text[], text[], text[], text[], text[], jsonb[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION :SCHEMA.publish_check_text(text, text, integer, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION :SCHEMA.publish_check_event(text, text, text, text, text, text, jsonb) FROM PUBLIC;
