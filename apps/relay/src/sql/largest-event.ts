import { boundedOutboxEventColumns } from './outbox-event-columns.js';

/**
 * The retained row with the largest payload, as an event (`ferry doctor` encodes it to check
 * max_payload); its data only when it has at most `$1` bytes.
 */
export function largestEventSql(schemaSql: string): string {
  return `SELECT ${boundedOutboxEventColumns('$1')}
       FROM ${schemaSql}.outbox o ORDER BY octet_length(o.data) DESC LIMIT 1`;
}
