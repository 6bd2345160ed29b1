-- The relay floor: the oldest relay a schema lets work on it.
--
-- During a rolling upgrade an old relay kept running beside the new ones,
-- with its old behaviour, unseen: nothing told it the schema had moved on.
-- Now every relay reports its release and its relay protocol (a number that
-- grows when what relays must do together changes) in its heartbeat, and the
-- schema keeps the lowest protocol it admits in settings. The database
-- enforces it, so a relay too old to know about the floor is stopped as well:
-- a lease row can be taken or renewed only by an instance whose heartbeat
-- reports a protocol at or above the floor. A relay released before this
-- migration reports none: its renewals fail and it can take no lane again.
--
-- And none of them is still sending when this commits: the migration first
-- locks relay_leases against every take and renewal, then waits until the
-- last lease held runs out (at most one lease term, 10 s by default). A
-- holder stops sending by its own clock a quarter-term before that, so when
-- the new schema becomes visible no relay of an older release holds a lane
-- it believes in. Leases are left to run out, not cleared: clearing them
-- would let another instance send on a lane whose old holder may still
-- think it holds it. Publishers do not wait for any of this (they touch
-- neither table).
--
-- Numbered 000013, not 000011 (free since the lease migration moved to
-- 000010): the runner would apply 000011 after 000012, but a schema's
-- version is its highest migration, so a relay or CLI of the 000012 release
-- would see a schema with 000011 as current and its own, and --print-sql
-- --from-version 12 would leave 000011 out.
--
-- Raising the floor later takes, in a later migration, the same lock and
-- wait on relay_leases as below (so no relay under the new floor is still
-- sending when it commits), then one statement:
--   UPDATE :SCHEMA.settings SET value = '3' WHERE name = 'relay_protocol_floor' AND value::integer < 3;
-- Protocols: 1 = leases with a term (000010), 2 = reports its release and
-- honours the floor (this migration).
-- A relay from before leases (outbox migration 000010) holds its lanes with
-- session advisory locks (namespace FNV-1a of 'ferry:lanes:<schema>', the
-- lane) and never reads relay_leases: nothing here could stop it. So the
-- migration refuses to run while one does, and the schema stays as it was
-- (the whole batch rolls back): stop those relays, then migrate again.
DO $$
DECLARE
  v_name bytea := convert_to('ferry:lanes:' || (SELECT n.nspname FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = ':SCHEMA.settings'::regclass), 'UTF8');
  v_hash bigint := 2166136261;
  v_holders text;
BEGIN
  FOR i IN 0 .. length(v_name) - 1 LOOP
    v_hash := ((v_hash # get_byte(v_name, i)) * 16777619) % 4294967296;
  END LOOP;
  SELECT string_agg(DISTINCT format('backend pid %s (%s%s)', l.pid, coalesce(nullif(a.application_name, ''), 'no application_name'),
                                    coalesce(' from ' || a.client_addr::text, '')), ', ')
    INTO v_holders
    FROM pg_catalog.pg_locks l LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
   WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = (v_hash & 2147483647)::oid
     AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = current_database());
  IF v_holders IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'FR002',
      MESSAGE = format('relays of a release from before lane leases hold lanes of schema %s by advisory lock (%s): nothing was migrated; stop every ferry relay of that release, then run ferry migrate again (docs/operations.md, Upgrades)', ':SCHEMA', v_holders);
  END IF;
END
$$;

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

ALTER TABLE :SCHEMA.relay_instances ADD COLUMN release text, ADD COLUMN protocol integer;
INSERT INTO :SCHEMA.settings (name, value) VALUES ('relay_protocol_floor', '2') ON CONFLICT (name) DO NOTHING;

CREATE FUNCTION :SCHEMA.relay_lease_floor() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_floor integer;
  v_protocol integer;
  v_release text;
BEGIN
  IF NEW.owner IS NULL THEN
    RETURN NEW; -- a release: anyone may give a lane up
  END IF;
  SELECT s.value::integer INTO v_floor FROM :SCHEMA.settings s WHERE s.name = 'relay_protocol_floor';
  SELECT i.protocol, i.release INTO v_protocol, v_release FROM :SCHEMA.relay_instances i WHERE i.instance = NEW.owner;
  IF v_protocol IS NULL OR v_protocol < coalesce(v_floor, 0) THEN
    RAISE EXCEPTION USING ERRCODE = 'FR001',
      MESSAGE = format('relay instance %s (release %s, relay protocol %s) may not lease lane %s of schema %s: the schema admits relay protocol %s or later',
                       NEW.owner, coalesce(v_release, 'unknown'), coalesce(v_protocol::text, 'unknown (older than 2)'), NEW.lane, TG_TABLE_SCHEMA, v_floor),
      HINT = 'stop this relay and run the release that migrated the schema (ferry --version names its relay protocol)';
  END IF;
  RETURN NEW;
END
$$;

CREATE TRIGGER relay_lease_floor BEFORE UPDATE ON :SCHEMA.relay_leases
  FOR EACH ROW EXECUTE FUNCTION :SCHEMA.relay_lease_floor();
