-- Relay support. A row with attempts > 0 is one the relay failed to publish
-- (backing off, or dead). Such a row blocks the later rows of its key, and
-- the relay checks for one on every claim: this index holds only those rows,
-- so the check costs a lookup in an almost empty index however large the
-- backlog is.
CREATE INDEX outbox_retrying_key_idx ON :SCHEMA.outbox (key, seq) WHERE published_at IS NULL AND attempts > 0;
