import type { OutboxEventRow } from '@ferry/core';

/**
 * The outbox columns an event is rebuilt from (`eventFromOutboxRow` of @ferry/core), in the
 * shape `OutboxEventRow` names them; with `o` as the outbox's alias in the statement.
 */
export const OUTBOX_EVENT_COLUMNS =
  'o.id::text AS id, o.key, o.version::text AS version, o.subject, o.type, o.source, o.content_type, o.data, o.headers, o.occurred_at';

/**
 * The same columns for a statement that must not load a row too large to hold: the data only when
 * it has at most `maxBytes` bytes (a parameter such as `$2`), null otherwise, and its size measured
 * in PostgreSQL as `data_bytes`. A stored row of 280 MB used to end the process that read it.
 */
export function boundedOutboxEventColumns(maxBytes: string): string {
  return `o.id::text AS id, o.key, o.version::text AS version, o.subject, o.type, o.source, o.content_type,
       CASE WHEN octet_length(o.data) <= ${maxBytes} THEN o.data END AS data, octet_length(o.data) AS data_bytes,
       o.headers, o.occurred_at`;
}

/** A row of `boundedOutboxEventColumns`: `data` is null when it was over the bound. */
export type BoundedOutboxEventRow = Omit<OutboxEventRow, 'data'> & { data: Uint8Array | null; data_bytes: number };
