-- Ferry consumer side. :SCHEMA is replaced by the quoted schema name.

-- The last version each consumer applied for each key. Written in the same
-- transaction as the handler's effect; its row lock serialises consumers of
-- one key across processes.
CREATE TABLE :SCHEMA.inbox_versions (
  consumer   text NOT NULL,
  key        text NOT NULL,
  version    bigint NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, key)
);

-- `dedupe` mode: ids of applied messages, pruned after the retention window.
CREATE TABLE :SCHEMA.inbox_messages (
  consumer    text NOT NULL,
  id          text NOT NULL,
  received_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, id)
);
CREATE INDEX inbox_messages_received_at_idx ON :SCHEMA.inbox_messages (received_at);
