-- Ferry producer side: the outbox and the per-key version counter.
-- :SCHEMA is replaced by the quoted schema name, :LANES by the lane count
-- fixed at the first migrate.

CREATE TABLE :SCHEMA.settings (
  name  text PRIMARY KEY,
  value text NOT NULL
);
INSERT INTO :SCHEMA.settings (name, value) VALUES ('lanes', ':LANES');

-- One row per key: the last version handed out. The publisher's upsert takes
-- this row's lock until commit, which serialises publishers of one key, so
-- version order is commit order.
CREATE TABLE :SCHEMA.key_versions (
  key     text PRIMARY KEY,
  version bigint NOT NULL
) WITH (fillfactor = 70); -- room on each page keeps the per-publish update HOT

CREATE TABLE :SCHEMA.outbox (
  seq             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id              uuid NOT NULL,
  key             text NOT NULL,
  version         bigint NOT NULL CHECK (version > 0),
  -- Fixed at migrate time; hashtextextended is the hash PostgreSQL's own hash
  -- partitioning relies on, so it is stable across upgrades.
  lane            smallint NOT NULL GENERATED ALWAYS AS
                    ((((hashtextextended(key, 0) % :LANES) + :LANES) % :LANES)::smallint) STORED,
  subject         text NOT NULL,
  type            text NOT NULL,
  source          text NOT NULL,
  content_type    text NOT NULL,
  data            bytea NOT NULL,
  headers         jsonb NOT NULL DEFAULT '{}'::jsonb,
  occurred_at     timestamptz NOT NULL,
  created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
  attempts        integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL DEFAULT '-infinity',
  last_error      text,
  published_at    timestamptz,
  dead_at         timestamptz,
  CONSTRAINT outbox_id_key UNIQUE (id),
  CONSTRAINT outbox_key_version_key UNIQUE (key, version)
);

-- The relay's hot indexes cover only unpublished rows: they stay small however
-- much published history is retained.
CREATE INDEX outbox_pending_lane_idx ON :SCHEMA.outbox (lane, seq) WHERE published_at IS NULL;
-- (The relay's blocked-key probe has its own tiny index of failed rows: 000002.)
-- Pruning and time-range replay walk published rows by time.
CREATE INDEX outbox_published_at_idx ON :SCHEMA.outbox (published_at) WHERE published_at IS NOT NULL;

-- The outbox is insert, update once (published), delete (pruned): vacuum and
-- analyze it eagerly so the partial indexes and the planner keep up.
ALTER TABLE :SCHEMA.outbox SET (fillfactor = 90, autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
