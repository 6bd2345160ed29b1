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

DO $contract$
DECLARE
  v_ok constant regprocedure := ':SCHEMA.publish_headers_ok(jsonb)'::regprocedure;
  v_check constant regprocedure := ':SCHEMA.publish_check_event(text, text, text, text, text, text, jsonb)'::regprocedure;
  v_ok_rule constant text := $r$h.key !~* '^(ce-|nats-)|^content-type$'$r$;
  v_check_rule constant text := $r$IF v_name ~* '^(ce-|nats-)|^content-type$' THEN$r$;
  v_def text;
BEGIN
  v_def := pg_get_functiondef(v_ok);
  IF (length(v_def) - length(replace(v_def, v_ok_rule, ''))) / length(v_ok_rule) <> 1 OR v_def ~ 'ce-dataschema' THEN
    RAISE EXCEPTION 'outbox migration 000018: % is not the check 000008 wrote; was it changed by hand?', v_ok;
  END IF;
  EXECUTE replace(v_def, v_ok_rule,
    '(' || v_ok_rule || $r$ OR h.key IN ('ce-dataschema', 'ce-dataversion'))$r$);

  v_def := pg_get_functiondef(v_check);
  IF (length(v_def) - length(replace(v_def, v_check_rule, ''))) / length(v_check_rule) <> 1 OR v_def ~ 'ce-dataschema' THEN
    RAISE EXCEPTION 'outbox migration 000018: % is not the function 000005 wrote; was it changed by hand?', v_check;
  END IF;
  EXECUTE replace(v_def, v_check_rule,
    $r$IF v_name ~* '^(ce-|nats-)|^content-type$' AND v_name NOT IN ('ce-dataschema', 'ce-dataversion') THEN$r$);
END
$contract$;
