-- Ferry consumer side: a heartbeat row per running inbox (issue 43), as
-- relays keep theirs in relay_instances. `ferry status` and the console listed
-- every relay and no inbox: an operator could not tell which services consume,
-- which release each runs, or that one had died. Each inbox inserts its row
-- on start, renews it every heartbeatIntervalMs (seen_at, and expires_at =
-- seen_at + 3 intervals, so a reader needs no interval of its own), and
-- deletes it on a clean stop. A row past expires_at belongs to an inbox that
-- stopped renewing (killed, frozen, cut off): shown as stale; a live inbox of
-- the same consumer deletes rows stale for over a day.
-- :SCHEMA is replaced by the quoted schema name.
CREATE TABLE :SCHEMA.inbox_instances (
  instance   text NOT NULL PRIMARY KEY,
  consumer   text NOT NULL,
  stream     text NOT NULL,
  mode       text NOT NULL,
  release    text NOT NULL,
  host       text,
  pid        integer,
  started_at timestamptz NOT NULL DEFAULT now(),
  seen_at    timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL
);
CREATE INDEX inbox_instances_consumer_idx ON :SCHEMA.inbox_instances (consumer);

-- The same row-level security as the other consumer tables (inbox migration
-- 000006): a role that runs one consumer sees and writes only that consumer's
-- heartbeats. A role already granted inbox_versions (by an earlier
-- `--print-grants`) gets the same privileges here and a copy of each of its
-- policies there, so an inbox running as that role beats after the upgrade
-- without new grants, confined as it was.
DO $$
DECLARE
  g record;
  p record;
BEGIN
  FOR g IN
    SELECT a.grantee, r.rolname, string_agg(DISTINCT a.privilege_type, ', ') AS privileges
      FROM pg_class c
     CROSS JOIN LATERAL aclexplode(c.relacl) a
      LEFT JOIN pg_roles r ON r.oid = a.grantee
     WHERE c.oid = ':SCHEMA.inbox_versions'::regclass
       AND a.grantee <> c.relowner
       AND a.privilege_type IN ('SELECT', 'INSERT', 'UPDATE', 'DELETE')
     GROUP BY a.grantee, r.rolname
  LOOP
    EXECUTE format('GRANT %s ON :SCHEMA.inbox_instances TO %s', g.privileges,
                   CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(g.rolname) END);
  END LOOP;
  FOR p IN
    SELECT pol.polname, pol.polcmd, pg_get_expr(pol.polqual, pol.polrelid) AS qual,
           pg_get_expr(pol.polwithcheck, pol.polrelid) AS withcheck,
           (SELECT string_agg(CASE WHEN r = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(r)) END, ', ')
              FROM unnest(pol.polroles) AS r) AS roles
      FROM pg_policy pol
     WHERE pol.polrelid = ':SCHEMA.inbox_versions'::regclass
  LOOP
    EXECUTE format('CREATE POLICY %I ON :SCHEMA.inbox_instances FOR %s TO %s%s%s', p.polname,
                   CASE p.polcmd WHEN 'r' THEN 'SELECT' WHEN 'a' THEN 'INSERT' WHEN 'w' THEN 'UPDATE' WHEN 'd' THEN 'DELETE' ELSE 'ALL' END,
                   p.roles,
                   coalesce(' USING (' || p.qual || ')', ''),
                   coalesce(' WITH CHECK (' || p.withcheck || ')', ''));
  END LOOP;
END
$$;

ALTER TABLE :SCHEMA.inbox_instances ENABLE ROW LEVEL SECURITY;
