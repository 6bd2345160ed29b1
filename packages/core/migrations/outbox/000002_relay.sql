-- ferry:no-transaction
-- Relay support. A row with attempts > 0 is one the relay failed to publish
-- (backing off, or dead). Such a row blocks the later rows of its key, and
-- the relay checks for one on every claim: this index holds only those rows,
-- so the check costs a lookup in an almost empty index however large the
-- backlog is.
--
-- Built concurrently, outside a transaction (the first line tells the
-- runner): the build reads the whole outbox, and inside a transaction it held
-- a lock that made every publish wait for it. An interrupted concurrent build
-- leaves an invalid index, which the first statement drops, so running ferry
-- migrate again finishes the job. (Applied in a transaction by releases
-- before issue 29: the index is the same; the runner records versions, not
-- file contents, so those databases are left as they are.)
DROP INDEX CONCURRENTLY IF EXISTS :SCHEMA.outbox_retrying_key_idx;
CREATE INDEX CONCURRENTLY outbox_retrying_key_idx ON :SCHEMA.outbox (key, seq) WHERE published_at IS NULL AND attempts > 0;
