-- The relay's marks no longer rewrite the event row (issue 30).
--
-- Until now a row's delivery state lived on the event row itself: the mark
-- set published_at, a non-HOT update of the whole row (published_at is in
-- the pending index's predicate) with four index inserts, 39.5 µs of
-- PostgreSQL CPU per event, the larger part of what the relay costs the
-- database (bench/scenarios/drain-pg-cost.ts). Any update of the event row
-- cost 22-26 µs there, HOT or not. Deleting a narrow row by its primary key
-- cost 5-7 µs.
--
-- So the outbox keeps what the publisher committed, and nothing else:
-- - outbox_pending: one narrow row per undelivered event (seq, lane, key and
--   its delivery state: attempts, next_attempt_at, last_error, dead_at). A
--   trigger adds it in the statement that inserts the event, whoever inserts
--   it (the publish functions, or the owner by hand), so an event is pending
--   if and only if it committed. The relay's claim walks this table's
--   (lane, key, seq) index; a failure record updates this row.
-- - outbox_published: one narrow row per delivered or discarded event,
--   inserted by the mark in the statement that deletes its pending row (seq,
--   when, and the attempts and last error it had; dead_at only for a row an
--   operator discarded). Insert-only until the prune, which walks it by
--   published_at (a B-tree: a BRIN index would cost an insert less, but once
--   the prune has freed the oldest pages new rows land among them and every
--   range would come to span the whole retention).
-- Deleting an event row (the prune, or the owner by hand) deletes its rows
-- in both, by trigger (run as the schema's owner: the relay role may delete
-- pending rows, the mark, but not delivery records), so no key can be left
-- behind a pending row without an event; TRUNCATE of the outbox empties both.
--
-- Roles: a role granted the relay's UPDATE on the outbox (ferry migrate
-- --print-grants --role-for relay, before this release) gets the relay's
-- privileges on the new tables here, and a role that could read the outbox
-- may read them and the view, so least-privilege relays, readers and
-- consoles go on working after the upgrade (the grants block below says
-- exactly how); the owner runs the migration.
--
-- The event row's columns for delivery state (published_at, attempts,
-- next_attempt_at, last_error, dead_at) are dropped, with the indexes built
-- on them: nothing can read a stale copy, and the publish maintains one
-- pending index (on the narrow table) instead of the outbox's partial one.
--
-- Relays: a relay of an earlier release would mark rows the old way, on
-- columns that are gone. Like 000013, this migration waits until every
-- lease held runs out (at most one lease term, 10 s by default) with the
-- lease table locked, then raises the relay floor to protocol 3, so no relay
-- of an earlier release can take a lane again, and none is sending when the
-- new tables become visible.
--
-- Publishers: the copy runs with the outbox locked, so publishes wait for
-- the migration to commit: 2.2-2.3 s for 1,000,000 retained rows with
-- 100,000 pending on a 2-core development machine
-- (bench/scenarios/migrate-000015.ts, docs/operations.md).
-- test/upgrade-backlog.test.ts copies a backlog mid-drain. Pending rows keep
-- their seq, so their order, their keys and their failure state.
-- :SCHEMA is replaced by the quoted schema name.

LOCK TABLE :SCHEMA.relay_leases IN SHARE ROW EXCLUSIVE MODE;
DO $$
DECLARE
  v_until timestamptz;
BEGIN
  SELECT max(l.expires_at) INTO v_until FROM :SCHEMA.relay_leases l WHERE l.owner IS NOT NULL AND l.expires_at > clock_timestamp();
  IF v_until IS NOT NULL THEN
    PERFORM pg_sleep(extract(epoch FROM v_until - clock_timestamp()) + 0.05);
  END IF;
END
$$;
UPDATE :SCHEMA.settings SET value = '3' WHERE name = 'relay_protocol_floor' AND value::integer < 3;

LOCK TABLE :SCHEMA.outbox IN ACCESS EXCLUSIVE MODE;

CREATE TABLE :SCHEMA.outbox_pending (
  seq             bigint PRIMARY KEY,
  lane            smallint NOT NULL,
  key             text COLLATE "C" NOT NULL,
  attempts        integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL DEFAULT '-infinity',
  last_error      text,
  dead_at         timestamptz
) WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);

CREATE TABLE :SCHEMA.outbox_published (
  seq          bigint PRIMARY KEY,
  published_at timestamptz NOT NULL DEFAULT now(),
  attempts     integer NOT NULL DEFAULT 0,
  last_error   text,
  -- Set only for a row an operator discarded (ferry dlq discard, the console):
  -- when it went dead, or the discard's time for a row that was backing off.
  dead_at      timestamptz
) WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);

INSERT INTO :SCHEMA.outbox_pending (seq, lane, key, attempts, next_attempt_at, last_error, dead_at)
SELECT o.seq, o.lane, o.key, o.attempts, o.next_attempt_at, o.last_error, o.dead_at
  FROM :SCHEMA.outbox o WHERE o.published_at IS NULL;
INSERT INTO :SCHEMA.outbox_published (seq, published_at, attempts, last_error, dead_at)
SELECT o.seq, o.published_at, o.attempts, o.last_error, o.dead_at
  FROM :SCHEMA.outbox o WHERE o.published_at IS NOT NULL
 ORDER BY o.published_at;

-- The claim's walk: a lane's keys in byte order, each key's rows in seq order.
CREATE INDEX outbox_pending_walk_idx ON :SCHEMA.outbox_pending (lane, key, seq);
-- Failed rows (backing off or dead), carrying lane and dead_at: the dlq
-- questions and the blocked-key checks read this index alone (as 000014's).
CREATE INDEX outbox_pending_failed_idx ON :SCHEMA.outbox_pending (key, seq) INCLUDE (lane, dead_at) WHERE attempts > 0;
CREATE INDEX outbox_published_time_idx ON :SCHEMA.outbox_published (published_at);

-- Each event with its delivery state, in the columns the outbox had before
-- this migration, for your own queries and dashboards (published_at is null
-- exactly while the event is pending). Read-only; Ferry's own statements
-- read the tables.
CREATE VIEW :SCHEMA.outbox_events AS
SELECT o.seq, o.id, o.key, o.version, o.lane, o.subject, o.type, o.source, o.content_type, o.data, o.headers,
       o.occurred_at, o.created_at,
       coalesce(p.attempts, d.attempts, 0) AS attempts, p.next_attempt_at, coalesce(p.last_error, d.last_error) AS last_error,
       coalesce(p.dead_at, d.dead_at) AS dead_at, d.published_at
  FROM :SCHEMA.outbox o
  LEFT JOIN :SCHEMA.outbox_pending p ON p.seq = o.seq
  LEFT JOIN :SCHEMA.outbox_published d ON d.seq = o.seq;

-- Grants follow the roles' grants on the outbox (see the header), read
-- before the drop below takes the column grants on the dropped columns:
-- - SELECT on the outbox: SELECT on both tables and the view (which shows
--   the event rows, so only to roles that could read them);
-- - SELECT on some of the dropped columns only: SELECT on both tables;
-- - UPDATE on the outbox or its published_at (the relay's grants before
--   this release): the relay's privileges on the two tables.
-- A grant that carried GRANT OPTION carries it here too.
DO $grants$
DECLARE
  r record;
  v_to text;
  v_opt text;
BEGIN
  FOR r IN
    SELECT a.grantee,
           bool_or(a.kind = 'rows') AS rows, bool_or(a.kind = 'rows' AND a.grantable) AS rows_opt,
           bool_or(a.kind = 'state') AS state, bool_or(a.kind = 'state' AND a.grantable) AS state_opt,
           bool_or(a.kind = 'relay') AS relay, bool_or(a.kind = 'relay' AND a.grantable) AS relay_opt
      FROM (SELECT x.grantee, CASE x.privilege_type WHEN 'SELECT' THEN 'rows' ELSE 'relay' END AS kind, x.is_grantable AS grantable
              FROM pg_catalog.pg_class c CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) x
             WHERE c.oid = ':SCHEMA.outbox'::regclass AND x.grantee <> c.relowner AND x.privilege_type IN ('SELECT', 'UPDATE')
            UNION ALL
            SELECT x.grantee, CASE x.privilege_type WHEN 'SELECT' THEN 'state' ELSE 'relay' END, x.is_grantable
              FROM pg_catalog.pg_attribute t
              JOIN pg_catalog.pg_class c ON c.oid = t.attrelid
              CROSS JOIN LATERAL pg_catalog.aclexplode(t.attacl) x
             WHERE t.attrelid = ':SCHEMA.outbox'::regclass AND x.grantee <> c.relowner
               AND ((x.privilege_type = 'SELECT' AND t.attname IN ('published_at', 'dead_at', 'attempts', 'next_attempt_at', 'last_error'))
                 OR (x.privilege_type = 'UPDATE' AND t.attname = 'published_at'))) a
     GROUP BY a.grantee
  LOOP
    v_to := CASE r.grantee WHEN 0 THEN 'PUBLIC' ELSE r.grantee::regrole::text END;
    IF r.rows THEN
      v_opt := CASE WHEN r.rows_opt THEN ' WITH GRANT OPTION' ELSE '' END;
      EXECUTE format('GRANT SELECT ON :SCHEMA.outbox_pending, :SCHEMA.outbox_published, :SCHEMA.outbox_events TO %s%s', v_to, v_opt);
    ELSIF r.state THEN
      v_opt := CASE WHEN r.state_opt THEN ' WITH GRANT OPTION' ELSE '' END;
      EXECUTE format('GRANT SELECT ON :SCHEMA.outbox_pending, :SCHEMA.outbox_published TO %s%s', v_to, v_opt);
    END IF;
    IF r.relay THEN
      v_opt := CASE WHEN r.relay_opt THEN ' WITH GRANT OPTION' ELSE '' END;
      EXECUTE format('GRANT SELECT, DELETE, UPDATE (attempts, next_attempt_at, last_error, dead_at) ON :SCHEMA.outbox_pending TO %s%s', v_to, v_opt);
      EXECUTE format('GRANT SELECT, INSERT ON :SCHEMA.outbox_published TO %s%s', v_to, v_opt);
    END IF;
  END LOOP;
END
$grants$;

ALTER TABLE :SCHEMA.outbox
  DROP COLUMN published_at,
  DROP COLUMN dead_at,
  DROP COLUMN attempts,
  DROP COLUMN next_attempt_at,
  DROP COLUMN last_error;
-- Inserted and deleted, never updated now.
ALTER TABLE :SCHEMA.outbox SET (fillfactor = 100);

-- Every inserted event is pending, in the inserting statement.
CREATE FUNCTION :SCHEMA.outbox_enqueue() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  INSERT INTO :SCHEMA.outbox_pending (seq, lane, key) SELECT n.seq, n.lane, n.key FROM outbox_new n;
  RETURN NULL;
END
$fn$;
CREATE TRIGGER outbox_enqueue AFTER INSERT ON :SCHEMA.outbox
  REFERENCING NEW TABLE AS outbox_new FOR EACH STATEMENT EXECUTE FUNCTION :SCHEMA.outbox_enqueue();

-- A deleted event leaves no delivery state behind.
CREATE FUNCTION :SCHEMA.outbox_forget() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  -- It runs as the owner: only as the outbox's own delete trigger.
  IF TG_RELID <> ':SCHEMA.outbox'::regclass OR TG_OP <> 'DELETE' OR TG_LEVEL <> 'STATEMENT' THEN
    RAISE EXCEPTION 'outbox_forget runs only as the delete trigger of :SCHEMA.outbox' USING ERRCODE = 'insufficient_privilege';
  END IF;
  DELETE FROM :SCHEMA.outbox_pending p WHERE p.seq IN (SELECT d.seq FROM outbox_old d);
  DELETE FROM :SCHEMA.outbox_published p WHERE p.seq IN (SELECT d.seq FROM outbox_old d);
  RETURN NULL;
END
$fn$;
CREATE TRIGGER outbox_forget AFTER DELETE ON :SCHEMA.outbox
  REFERENCING OLD TABLE AS outbox_old FOR EACH STATEMENT EXECUTE FUNCTION :SCHEMA.outbox_forget();

CREATE FUNCTION :SCHEMA.outbox_forget_all() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  TRUNCATE :SCHEMA.outbox_pending, :SCHEMA.outbox_published;
  RETURN NULL;
END
$fn$;
CREATE TRIGGER outbox_forget_all AFTER TRUNCATE ON :SCHEMA.outbox
  FOR EACH STATEMENT EXECUTE FUNCTION :SCHEMA.outbox_forget_all();

-- Trigger functions are Ferry's own: nobody may attach them to a table of theirs (EXECUTE is checked
-- when a trigger is created, and outbox_forget runs with the owner's rights).
REVOKE ALL ON FUNCTION :SCHEMA.outbox_enqueue(), :SCHEMA.outbox_forget(), :SCHEMA.outbox_forget_all() FROM PUBLIC;

ANALYZE :SCHEMA.outbox_pending;
ANALYZE :SCHEMA.outbox_published;
