import { outboxWithState, STATE_COLUMNS, waitingBehind } from './outbox-state.js';
/**
 * One outbox row `$1` (`ferry dlq show`), with how many later rows of its key wait behind it: its
 * data's first `$2` bytes only, and its whole size, so a huge stored row is shown, not loaded.
 */
export function showEventSql(schemaSql: string): string {
  return `SELECT o.seq::text AS seq, o.id::text AS id, o.key, o.version::text AS version, o.lane, o.subject, o.type, o.source, o.content_type,
              substring(o.data FROM 1 FOR $2::integer) AS data, octet_length(o.data) AS data_bytes, o.headers, o.occurred_at, o.created_at, ${STATE_COLUMNS},
              ${waitingBehind(schemaSql, 'o')}::text AS blocked
         FROM ${outboxWithState(schemaSql)} WHERE o.id = $1::uuid`;
}
