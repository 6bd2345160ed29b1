-- The operator's audit trail: every action that changes an event's fate
-- (dlq retry and discard, parked retry and discard), from the CLI or the
-- console, with who asked, through what, for which selection, how many rows
-- it changed and how it ended. A dlq action writes its row in the same
-- transaction as its change, so a change is never unrecorded; the console
-- shows the newest rows. Small (a row per operator action): never pruned by
-- Ferry; delete old rows yourself if you must.
CREATE TABLE :SCHEMA.operator_actions (
  id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at      timestamptz NOT NULL DEFAULT now(),
  -- The operator: the console's authenticated user, or the CLI's OS user and host.
  actor   text NOT NULL,
  -- The database role that made the change.
  db_role text NOT NULL DEFAULT current_user,
  via     text NOT NULL CHECK (via IN ('cli', 'console')),
  action  text NOT NULL,
  -- The selection as given: ids, key, subject, type, time range, consumer.
  filter  jsonb NOT NULL,
  rows    integer NOT NULL,
  outcome text NOT NULL
);
