-- ferry:no-transaction
-- The relay claims a key's rows only from its head: the key's first
-- unpublished row. It walks the distinct keys of a lane (a skip scan, one
-- index descent per key) instead of every pending row in seq order, so a key
-- blocked behind a failed head costs one probe per claim however many rows
-- wait behind it (a blocked key with 500,000 pending rows made each seq-order
-- claim take 445-520 ms; bench/scenarios/blocked-key.ts).
-- This index replaces (lane, seq): the publish path still maintains one
-- pending index. Keys are ordered in the "C" collation (bytes): a skip scan under a
-- linguistic collation spends its time in strcoll. :SCHEMA is replaced by the quoted schema name.
--
-- Built and the old index dropped concurrently, outside a transaction (the
-- first line tells the runner): inside a transaction the build held a lock on
-- the outbox that made every publish wait until it ended, and the drop one
-- that queued every publish behind the transactions reading the outbox. An
-- interrupted concurrent build leaves an invalid index, which the first
-- statement drops, so running ferry migrate again finishes the job. (Applied
-- in a transaction by releases before issue 29: the indexes are the same; the
-- runner records versions, not file contents, so those databases are left as
-- they are.)
DROP INDEX CONCURRENTLY IF EXISTS :SCHEMA.outbox_pending_key_idx;
CREATE INDEX CONCURRENTLY outbox_pending_key_idx ON :SCHEMA.outbox (lane, key COLLATE "C", seq) WHERE published_at IS NULL;
DROP INDEX CONCURRENTLY IF EXISTS :SCHEMA.outbox_pending_lane_idx;
