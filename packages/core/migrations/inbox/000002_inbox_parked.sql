-- Ferry consumer side: events of a key parked in the consumer's pg-boss queue
-- and not yet applied or discarded. In `sequential` mode a key with parked
-- events parks its later events behind them, so its order survives parking.
-- Kept on the version row so the check costs nothing: the gate reads that row
-- under its lock anyway.
ALTER TABLE :SCHEMA.inbox_versions ADD COLUMN parked integer NOT NULL DEFAULT 0;
