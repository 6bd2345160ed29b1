-- Ferry consumer side, `sequential` mode: versions that arrived before the
-- version they follow (issue 13). Such a version used to be nak'ed with a
-- delay until its gap closed; a nak'ed message stays ack-pending on the
-- server, so one key's early versions could fill the consumer's whole
-- max_ack_pending and stall every other key (and deadlock when the version
-- that closes the gap sat behind them in the stream). Now the inbox stores
-- the early message here, in one transaction under the key's row lock, and
-- acks it; applying a key's version applies its stored successors, and after
-- gapTimeoutMs a key's stored versions move to the parking lot in order.
-- `message` is the message as it came (the parked-job format).
CREATE TABLE :SCHEMA.inbox_early (
  consumer        text NOT NULL,
  key             text NOT NULL,
  version         bigint NOT NULL,
  message         jsonb NOT NULL,
  received_at     timestamptz NOT NULL DEFAULT now(),
  attempts        integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, key, version)
);
CREATE INDEX inbox_early_received_at_idx ON :SCHEMA.inbox_early (consumer, received_at);
