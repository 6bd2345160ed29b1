-- The publish functions refuse a subject NATS reserves for itself (issue 42).
-- :SCHEMA is replaced by the quoted schema name.
--
-- A role with only the publisher's grants stored an event with the subject
-- $JS.API.STREAM.DELETE.<victim>: a well-formed subject, so 000005's checks
-- let it through, and the relay, which sends every event as a request with a
-- reply, sent JetStream a command. It deleted the stream (and, with
-- $JS.API.STREAM.PURGE.<s> and $JS.API.CONSUMER.DELETE.<s>.<c>, purged
-- another and deleted a consumer).
--
-- The rule, as the publisher states it (RESERVED_SUBJECT_TOKENS in
-- packages/core/src/validate.ts): a subject whose first token starts with $
-- ($JS, $SYS, $KV, $O, $MQTT, …: "by convention subject names starting with a
-- $ are reserved for system use", https://docs.nats.io/nats-concepts/subjects),
-- or is _INBOX (request replies, the relay's PubAcks among them), _R_ (service
-- import replies) or _GR_ (gateway replies), is refused. Case-sensitive, as
-- NATS subjects are: _inbox.x is an ordinary subject, and so is orders.$x.
-- The relay refuses such a row too, whoever stored it (before this
-- migration, or the owner by hand): it goes dead with reason reserved_subject
-- and is never sent.
--
-- A refusal raises 22023 with COLUMN naming the field (subject, or
-- events[i].subject) as 000005's checks do, and CONSTRAINT reserved_subject,
-- which the publisher turns into a ReservedSubjectError; nothing is written.
--
-- The rule is written once, in publish_subject_reserved (LANGUAGE sql with no
-- SET clause, so PostgreSQL inlines it, as 000008's publish_event_ok). It
-- joins the checks where they are decided and where they are explained:
-- - publish_event_ok (000008, inlined into both entry functions, and called
--   by publish_events_ok, which the 000006 functions start with) gains
--   "AND NOT publish_subject_reserved(p_su)", so such an event leaves the
--   short path and fails the full function's checks;
-- - publish_check_event (000005), which raises the precise error, calls
--   publish_check_subject after its subject rule.
-- Both are patched from their stored bodies (nothing else in them is
-- restated); CREATE OR REPLACE keeps every grant, and the publish functions
-- themselves are not touched.

CREATE FUNCTION :SCHEMA.publish_subject_reserved(p_su text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $fn$
  SELECT p_su ~ '^(\$|(_INBOX|_R_|_GR_)(\.|$))'
$fn$;

CREATE FUNCTION :SCHEMA.publish_check_subject(p_field text, p_subject text)
RETURNS void LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF :SCHEMA.publish_subject_reserved(p_subject) THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', COLUMN = p_field, CONSTRAINT = 'reserved_subject',
      MESSAGE = format('%s %s is reserved by NATS: a first token that starts with "$" ($JS, $SYS, $KV, …) or is _INBOX, _R_, _GR_ '
                       'addresses the server, JetStream''s API or a client''s replies, not a stream; '
                       'publish to a subject of your own, e.g. "orders.placed"', p_field, left(to_json(p_subject)::text, 80));
  END IF;
END
$fn$;

REVOKE ALL ON FUNCTION :SCHEMA.publish_subject_reserved(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION :SCHEMA.publish_check_subject(text, text) FROM PUBLIC;

DO $reserved$
DECLARE
  v_ok constant regprocedure := ':SCHEMA.publish_event_ok(text, text, text, text, text, jsonb)'::regprocedure;
  v_check constant regprocedure := ':SCHEMA.publish_check_event(text, text, text, text, text, text, jsonb)'::regprocedure;
  v_anchor constant text := E'\n  IF p_headers IS NULL THEN\n';
  v_src text;
  v_def text;
BEGIN
  -- 000008's publish_event_ok: SELECT coalesce(<rules>, false)
  SELECT prosrc INTO v_src FROM pg_catalog.pg_proc WHERE oid = v_ok;
  IF v_src !~ '^\s*SELECT coalesce\(.*\)\s*$' OR v_src ~ 'publish_subject_reserved' THEN
    RAISE EXCEPTION 'outbox migration 000016: % is not the check 000008 wrote; was it changed by hand?', v_ok;
  END IF;
  EXECUTE format(
    'CREATE OR REPLACE FUNCTION :SCHEMA.publish_event_ok(p_k text, p_su text, p_ty text, p_so text, p_ct text, p_h jsonb) '
    'RETURNS boolean LANGUAGE sql IMMUTABLE AS %L',
    rtrim(v_src, E' \n') || E'\n    AND NOT :SCHEMA.publish_subject_reserved(p_su)\n');

  v_def := pg_get_functiondef(v_check);
  IF (length(v_def) - length(replace(v_def, v_anchor, ''))) / length(v_anchor) <> 1 OR v_def ~ 'publish_check_subject' THEN
    RAISE EXCEPTION 'outbox migration 000016: % is not the function 000005 wrote; was it changed by hand?', v_check;
  END IF;
  EXECUTE replace(v_def, v_anchor,
    E'\n  PERFORM :SCHEMA.publish_check_subject(p_prefix || ''subject'', p_subject);' || v_anchor);
END
$reserved$;
