-- Row-level security on the consumer tables. Several consumers share them
-- (their `consumer` column), and the role that runs one consumer must not
-- read or change another's versions, message ids or early versions: with RLS
-- on, a role that does not own the tables sees and writes only the rows its
-- policy allows. `ferry migrate --print-grants --for inbox --role R
-- --consumer NAME` prints R's policy, named `ferry_role_<R>`. The tables'
-- owner (who runs `ferry migrate`) and superusers bypass RLS, so an inbox
-- running as the owner sees no change, and the policy's test is an equality
-- on the primary key's first column, which the gate's statements already
-- test (text equality is leakproof, so the planner still uses the index).
--
-- A role granted these tables by an earlier `--print-grants` has no policy,
-- and would from now on see no rows and be refused every insert. So every
-- role that holds a privilege on one of the tables now gets the policy an
-- unconfined `--print-grants` prints (every consumer's rows): upgrading
-- changes nothing for it until its grants are printed again with --consumer.
-- A grant to PUBLIC gets a policy for PUBLIC, for the same reason.
-- Idempotent; :SCHEMA is replaced by the quoted schema name.
DO $$
DECLARE
  g record;
  policy text;
BEGIN
  FOR g IN
    SELECT DISTINCT c.oid AS tbl, a.grantee, r.rolname
      FROM pg_class c
     CROSS JOIN LATERAL aclexplode(c.relacl) a
      LEFT JOIN pg_roles r ON r.oid = a.grantee
     WHERE c.oid IN (':SCHEMA.inbox_versions'::regclass, ':SCHEMA.inbox_messages'::regclass, ':SCHEMA.inbox_early'::regclass)
       AND a.grantee <> c.relowner
  LOOP
    -- The name grants.ts's inboxPolicyName gives the role.
    policy := CASE WHEN g.grantee = 0 THEN 'ferry_role_public'
                   WHEN length('ferry_role_' || g.rolname) <= 63 THEN 'ferry_role_' || g.rolname
                   ELSE 'ferry_role_' || left(g.rolname, 40) || '_' || left(md5(g.rolname), 8) END;
    IF NOT EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = g.tbl AND p.polname = policy) THEN
      EXECUTE format('CREATE POLICY %I ON %s FOR ALL TO %s USING (true) WITH CHECK (true)', policy, g.tbl::regclass,
                     CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(g.rolname) END);
    END IF;
  END LOOP;
END
$$;

ALTER TABLE :SCHEMA.inbox_versions ENABLE ROW LEVEL SECURITY;
ALTER TABLE :SCHEMA.inbox_messages ENABLE ROW LEVEL SECURITY;
ALTER TABLE :SCHEMA.inbox_early ENABLE ROW LEVEL SECURITY;
