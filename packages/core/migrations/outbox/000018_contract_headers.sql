-- The publish functions let through the two headers of an event contract
-- (issue 45). :SCHEMA is replaced by the quoted schema name.
--
-- A publisher given a contract registry (@ferry/contracts) stamps each event
-- with the contract its data was checked against: CloudEvents' dataschema
-- (`ce-dataschema`, e.g. ferry:OrderPlaced/v2) and Ferry's extension
-- `ce-dataversion` (2). They travel in the outbox row's headers, and the
-- relay sends them under these exact names (encodeEvent). 000005's checks
-- refuse every ce-* header name in any case, so they refused these too.
--
-- What changes: exactly `ce-dataschema` and `ce-dataversion`, so spelled
-- (lower case), are allowed as stored header names. Every other ce-*, Nats-*
-- and Content-Type name is still refused, and so is another spelling of
-- these two (CE-DataSchema), which the relay would leave out anyway. The
-- values keep the rules of every header value (a string without control
-- characters, at most 4,096 characters). A hand-made dataschema forges
-- nothing the relay trusts: it names the contract the data claims, and the
-- consumer validates the data against it and parks what does not fit.
--
-- The rule is patched where it is decided (000008's publish_headers_ok,
-- inlined into the short path) and where it is explained (000005's
-- publish_check_event), from their stored bodies, as 000016 did; CREATE OR
-- REPLACE keeps every grant.
--
-- publish_headers_ok also gains a short path for the common case, an event
-- whose only headers are these two: their values are checked one by one,
-- without jsonb_each, the DISTINCT count and the per-header name rules. It
-- returns true only where the full check would (the two names pass every name
-- rule; the values get the same value rules, the version a stricter one), and
-- anything else goes on to the full check. Measured by
-- bench/scenarios/contract-cost.ts: the full check cost about 21 µs of the
-- backend's CPU per publish for the two headers.

DO $contract$
DECLARE
  v_ok constant regprocedure := ':SCHEMA.publish_headers_ok(jsonb)'::regprocedure;
  v_check constant regprocedure := ':SCHEMA.publish_check_event(text, text, text, text, text, text, jsonb)'::regprocedure;
  v_ok_rule constant text := $r$h.key !~* '^(ce-|nats-)|^content-type$'$r$;
  v_check_rule constant text := $r$IF v_name ~* '^(ce-|nats-)|^content-type$' THEN$r$;
  v_ok_start constant text := E'\nBEGIN\n  RETURN (';
  v_ok_short constant text := $r$  -- 000018: only a contract's two headers (see the migration).
  IF (p_h - 'ce-dataschema' - 'ce-dataversion') = '{}'::jsonb
     AND jsonb_typeof(p_h -> 'ce-dataschema') = 'string' AND jsonb_typeof(p_h -> 'ce-dataversion') = 'string'
     AND (p_h ->> 'ce-dataversion') ~ '^[0-9]{1,7}$'
     AND char_length(p_h ->> 'ce-dataschema') <= 4096 AND (p_h ->> 'ce-dataschema') !~ '[\x01-\x08\x0a-\x1f\x7f]'
     AND btrim(p_h ->> 'ce-dataschema', E'\t\n\u000b\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff') = (p_h ->> 'ce-dataschema') THEN
    RETURN true;
  END IF;
$r$;
  v_def text;
BEGIN
  v_def := pg_get_functiondef(v_ok);
  IF (length(v_def) - length(replace(v_def, v_ok_rule, ''))) / length(v_ok_rule) <> 1 OR v_def ~ 'ce-dataschema' THEN
    RAISE EXCEPTION 'outbox migration 000018: % is not the check 000008 wrote; was it changed by hand?', v_ok;
  END IF;
  IF (length(v_def) - length(replace(v_def, v_ok_start, ''))) / length(v_ok_start) <> 1 THEN
    RAISE EXCEPTION 'outbox migration 000018: % does not start as 000008 wrote it; was it changed by hand?', v_ok;
  END IF;
  EXECUTE replace(replace(v_def, v_ok_rule, '(' || v_ok_rule || $r$ OR h.key IN ('ce-dataschema', 'ce-dataversion'))$r$),
    v_ok_start, E'\nBEGIN\n' || v_ok_short || E'  RETURN (');

  v_def := pg_get_functiondef(v_check);
  IF (length(v_def) - length(replace(v_def, v_check_rule, ''))) / length(v_check_rule) <> 1 OR v_def ~ 'ce-dataschema' THEN
    RAISE EXCEPTION 'outbox migration 000018: % is not the function 000005 wrote; was it changed by hand?', v_check;
  END IF;
  EXECUTE replace(v_def, v_check_rule,
    $r$IF v_name ~* '^(ce-|nats-)|^content-type$' AND v_name NOT IN ('ce-dataschema', 'ce-dataversion') THEN$r$);
END
$contract$;
