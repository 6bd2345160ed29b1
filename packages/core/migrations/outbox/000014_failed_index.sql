-- ferry:no-transaction
-- The index of failed rows (backing off or dead: attempts > 0, not
-- published) carries each row's lane and dead_at, so the questions asked of
-- failed rows alone are answered from the index without reading the table:
-- how many rows a dlq action selects, how many are dead, of which keys, and
-- where each key's head is (the console's preview of "discard every dead
-- row" with 100,000 dead rows read 100,000 heap tuples first: 0.5-0.9 s;
-- bench/scenarios/console-load.ts). The relay's blocked-key check reads the
-- same (key, seq) order as before. :SCHEMA is replaced by the quoted schema name.
--
-- Built, and the old index dropped, concurrently, outside a transaction (the
-- first line tells the runner), as 000002 and 000004 explain: publishes never
-- wait for it. An interrupted build leaves an invalid index, which the first
-- statement drops, so running ferry migrate again finishes the job; the old
-- index goes only once the new one is built.
DROP INDEX CONCURRENTLY IF EXISTS :SCHEMA.outbox_failed_idx;
CREATE INDEX CONCURRENTLY outbox_failed_idx ON :SCHEMA.outbox (key, seq) INCLUDE (lane, dead_at) WHERE published_at IS NULL AND attempts > 0;
DROP INDEX CONCURRENTLY IF EXISTS :SCHEMA.outbox_retrying_key_idx;
