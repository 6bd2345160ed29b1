-- The relay claims a key's rows only from its head: the key's first
-- unpublished row. It walks the distinct keys of a lane (a skip scan, one
-- index descent per key) instead of every pending row in seq order, so a key
-- blocked behind a failed head costs one probe per claim however many rows
-- wait behind it (a blocked key with 500,000 pending rows made each seq-order
-- claim take 445-520 ms; bench/scenarios/blocked-key.ts).
-- This index replaces (lane, seq): the publish path still maintains one
-- pending index. Keys are ordered in the "C" collation (bytes): a skip scan under a
-- linguistic collation spends its time in strcoll. :SCHEMA is replaced by the quoted schema name.
CREATE INDEX outbox_pending_key_idx ON :SCHEMA.outbox (lane, key COLLATE "C", seq) WHERE published_at IS NULL;
DROP INDEX :SCHEMA.outbox_pending_lane_idx;
