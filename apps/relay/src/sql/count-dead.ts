import { type DeadSelector, deadCondition } from './dead-events.js';

/** How many selected dead rows there are, and of how many keys. */
export function countDeadSql(schemaSql: string, selector: DeadSelector): string {
  return `SELECT count(*)::text AS n, count(DISTINCT o.key)::text AS keys FROM ${schemaSql}.outbox_pending p JOIN ${schemaSql}.outbox o ON o.seq = p.seq WHERE ${deadCondition(selector)}`;
}
