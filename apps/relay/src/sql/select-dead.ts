import { type DeadSelector, deadCondition } from './dead-events.js';

/** The ids of the selected dead rows, in seq order (`ferry dlq … --dry-run`, and what retry and discard confirm). */
export function selectDeadIdsSql(schemaSql: string, selector: DeadSelector): string {
  return `SELECT o.id::text AS id FROM ${schemaSql}.outbox o WHERE ${deadCondition(selector)} ORDER BY o.seq`;
}
