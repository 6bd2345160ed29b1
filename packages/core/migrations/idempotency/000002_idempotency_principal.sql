-- Ferry request edge: the caller (principal) becomes part of an
-- Idempotency-Key's identity (issue 32, item 3).
--
-- Before this migration the primary key was (scope, key) and the principal
-- only entered the fingerprint, so one caller's key answered another: by
-- default (no principal) with the first caller's stored response, otherwise
-- with a permanent 422 (key squatting, and an oracle telling whether a key
-- exists). A key is only meaningful for the client that made it, so the
-- stored key is now (scope, principal, key):
--
--   principal = ''            a row recorded before this migration. Its
--                             fingerprint is of the old form (it hashed the
--                             principal with the body), so no request made
--                             after the upgrade ever matches or replays it;
--                             the janitor prunes it when it expires. A retry
--                             that straddles the upgrade runs as a new request.
--   principal = '*'           a key the application declared global
--                             (`globalKeys: true`): shared by every caller.
--   principal = 64 hex chars  sha256 of the caller's principal. A digest, not
--                             the id itself: user ids stay out of this table
--                             (and its backups), and the column has a fixed
--                             width whatever a principal looks like.
--
-- Rebuilding the primary key takes an ACCESS EXCLUSIVE lock on the table for
-- the time it takes to index it; the table holds one row per key for the
-- retention window only.
ALTER TABLE :SCHEMA.idempotency_keys
  ADD COLUMN principal text NOT NULL DEFAULT ''
    CONSTRAINT idempotency_keys_principal_check CHECK (principal IN ('', '*') OR principal ~ '^[0-9a-f]{64}$');
ALTER TABLE :SCHEMA.idempotency_keys DROP CONSTRAINT idempotency_keys_pkey;
ALTER TABLE :SCHEMA.idempotency_keys ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (scope, principal, key);
-- A row of the old form can never match a new request's fingerprint; say so in the catalog too.
COMMENT ON COLUMN :SCHEMA.idempotency_keys.principal IS
  'sha256 (hex) of the caller''s principal; ''*'' for global keys; '''' for rows recorded before migration 2 (never replayed)';
COMMENT ON COLUMN :SCHEMA.idempotency_keys.fingerprint IS
  'sha256 of method, target (path and query), content type and body, length-prefixed (fingerprint v2)';
