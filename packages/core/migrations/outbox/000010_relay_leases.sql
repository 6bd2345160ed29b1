-- Lane leases as rows with a term, instead of session advisory locks.
--
-- An advisory lock lives as long as its session, and a frozen or cut-off
-- relay's session lives on (its kernel answers keepalives, or nobody tells
-- the server at all): its lanes stayed held for as long as it was stuck. A
-- row lease ends by the database's clock alone: a holder renews it before
-- expires_at, or anyone may take it after. Every take adds one to the lane's
-- epoch, and every mark and failure record the relay writes names the epoch
-- its row was claimed under, so a holder that lost the lane changes nothing.
CREATE TABLE :SCHEMA.relay_leases (
  lane       smallint PRIMARY KEY,
  owner      text,
  epoch      bigint NOT NULL DEFAULT 0,
  renewed_at timestamptz,
  expires_at timestamptz
) WITH (fillfactor = 50);
-- The lane count from the settings the first migrate fixed, not :LANES: a
-- script printed with --print-sql --from-version for an existing database
-- does not know that database's lane count.
INSERT INTO :SCHEMA.relay_leases (lane)
SELECT generate_series(0, s.value::integer - 1) FROM :SCHEMA.settings s WHERE s.name = 'lanes';

-- One row per relay instance, renewed with its leases: the live instances
-- (unexpired rows) decide each one's fair share of the lanes, and ferry
-- status shows who they are.
CREATE TABLE :SCHEMA.relay_instances (
  instance         text PRIMARY KEY,
  application_name text NOT NULL,
  backend_pid      integer NOT NULL,
  client_addr      text,
  started_at       timestamptz NOT NULL DEFAULT now(),
  seen_at          timestamptz NOT NULL,
  expires_at       timestamptz NOT NULL
) WITH (fillfactor = 50);
