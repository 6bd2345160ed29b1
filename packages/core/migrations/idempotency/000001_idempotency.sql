-- Ferry request edge: Idempotency-Key records, in the schema given to
-- `ferry migrate --idempotency`.

-- One row per (scope, key). The row is inserted in the operation's own
-- transaction before the operation runs and filled with the result before
-- that transaction commits, so another session only ever sees a finished row
-- (or none): the key and the operation's writes commit, or roll back, together.
-- The primary key is the unique constraint that decides between concurrent
-- requests with one key.
CREATE TABLE :SCHEMA.idempotency_keys (
  scope       text NOT NULL,
  key         text NOT NULL,
  -- sha256 of the canonical request (method, path, body, principal).
  fingerprint bytea NOT NULL CHECK (octet_length(fingerprint) = 32),
  -- The stored HTTP status; NULL only while the owning transaction runs.
  status      smallint CHECK (status BETWEEN 100 AND 599),
  headers     jsonb NOT NULL DEFAULT '{}'::jsonb,
  -- The body exactly as first answered; body_kind says how to read it back.
  body        bytea,
  body_kind   text NOT NULL DEFAULT 'none' CHECK (body_kind IN ('none', 'json', 'text', 'bytes')),
  created_at  timestamptz NOT NULL DEFAULT now(),
  expires_at  timestamptz NOT NULL,
  PRIMARY KEY (scope, key)
);

-- The janitor deletes expired rows oldest first, in bounded batches.
CREATE INDEX idempotency_keys_expires_at_idx ON :SCHEMA.idempotency_keys (expires_at);
