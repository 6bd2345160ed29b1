import { OUTBOX_EVENT_COLUMNS } from './outbox-event-columns.js';

/** The retained row with the largest payload, as an event (`ferry doctor` encodes it to check max_payload). */
export function largestEventSql(schemaSql: string): string {
  return `SELECT ${OUTBOX_EVENT_COLUMNS}
       FROM ${schemaSql}.outbox o ORDER BY octet_length(o.data) DESC LIMIT 1`;
}
