/**
 * The outbox columns an event is rebuilt from (`eventFromOutboxRow` of @ferry/core), in the
 * shape `OutboxEventRow` names them; with `o` as the outbox's alias in the statement.
 */
export const OUTBOX_EVENT_COLUMNS =
  'o.id::text AS id, o.key, o.version::text AS version, o.subject, o.type, o.source, o.content_type, o.data, o.headers, o.occurred_at';
