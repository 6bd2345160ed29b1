-- The audit trail states what the database knows, not what a caller says.
-- Until now the relay's role held INSERT on operator_actions, so it could
-- write any row it liked: a date three days back, another operator's name,
-- `ferry_admin` as the database role (issue 42, item 4). From here on:
-- - an action is recorded only through record_operator_action, a SECURITY
--   DEFINER function owned by the schema's owner, which sets `at` (the
--   clock at the insert, clock_timestamp(): not the transaction's start,
--   which a caller could hold open) and `db_role` (session_user: the role
--   that logged in, which no SET ROLE changes and, inside a SECURITY DEFINER
--   function, is still the caller's, where current_user is the owner's);
--   `actor`, `via`, `action`, `filter`, `rows` and `outcome` are the
--   caller's claims, and docs/security.md says so;
-- - no role but the owner holds INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES
--   or TRIGGER on the table (a role that held INSERT, the relay's, gets
--   EXECUTE on the function instead, so an upgraded relay keeps recording);
-- - a statement trigger refuses every write by a role without the owner's
--   rights, so a grant made later (an earlier Ferry's --print-grants, a
--   `GRANT ALL ON ALL TABLES IN SCHEMA`) cannot reopen the table.
-- Idempotent (CREATE OR REPLACE, DROP IF EXISTS); :SCHEMA is replaced by the quoted schema name.

CREATE OR REPLACE FUNCTION :SCHEMA.record_operator_action(
  p_actor text, p_via text, p_action text, p_filter jsonb, p_rows integer, p_outcome text
) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  INSERT INTO :SCHEMA.operator_actions (at, actor, db_role, via, action, filter, rows, outcome)
  VALUES (clock_timestamp(), left(p_actor, 200), session_user::text, p_via, p_action, p_filter, p_rows, left(p_outcome, 1000))
  RETURNING id;
$fn$;
REVOKE ALL ON FUNCTION :SCHEMA.record_operator_action(text, text, text, jsonb, integer, text) FROM PUBLIC;

-- Runs with the writer's rights: inside record_operator_action that is the
-- owner (who passes), on a direct write it is the caller's role.
CREATE OR REPLACE FUNCTION :SCHEMA.operator_actions_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF NOT pg_has_role(current_user, (SELECT c.relowner FROM pg_class c WHERE c.oid = TG_RELID), 'MEMBER') THEN
    RAISE EXCEPTION 'role % may not % %.%: operator actions are recorded only through %.record_operator_action(), which sets at and db_role itself',
      current_user, TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_TABLE_SCHEMA
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NULL;
END
$fn$;
REVOKE ALL ON FUNCTION :SCHEMA.operator_actions_guard() FROM PUBLIC;
DROP TRIGGER IF EXISTS operator_actions_guard ON :SCHEMA.operator_actions;
CREATE TRIGGER operator_actions_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON :SCHEMA.operator_actions
  FOR EACH STATEMENT EXECUTE FUNCTION :SCHEMA.operator_actions_guard();

-- Every write privilege a role other than the owner holds, on the table or
-- on a column of it (revoking the table's privilege revokes the columns'
-- too; CASCADE takes what such a role granted on). PUBLIC included.
DO $grants$
DECLARE
  r record;
  v_to text;
BEGIN
  FOR r IN
    SELECT a.grantee, bool_or(a.privilege_type = 'INSERT') AS inserted
      FROM (SELECT x.grantee, x.privilege_type
              FROM pg_catalog.pg_class c CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) x
             WHERE c.oid = ':SCHEMA.operator_actions'::regclass AND x.grantee <> c.relowner
            UNION ALL
            SELECT x.grantee, x.privilege_type
              FROM pg_catalog.pg_attribute t
              JOIN pg_catalog.pg_class c ON c.oid = t.attrelid
              CROSS JOIN LATERAL pg_catalog.aclexplode(t.attacl) x
             WHERE t.attrelid = ':SCHEMA.operator_actions'::regclass AND x.grantee <> c.relowner) a
     WHERE a.privilege_type IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER')
     GROUP BY a.grantee
  LOOP
    v_to := CASE r.grantee WHEN 0 THEN 'PUBLIC' ELSE r.grantee::regrole::text END;
    EXECUTE format('REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON :SCHEMA.operator_actions FROM %s CASCADE', v_to);
    IF r.inserted THEN
      EXECUTE format('GRANT EXECUTE ON FUNCTION :SCHEMA.record_operator_action(text, text, text, jsonb, integer, text) TO %s', v_to);
    END IF;
  END LOOP;
END
$grants$;
