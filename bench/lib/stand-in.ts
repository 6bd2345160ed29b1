import { type Queryable, ValidationError } from '@ferry/core';

/**
 * A connection that answers the publish functions' SELECT at once, as
 * PostgreSQL would for fresh events, and stands in for an open transaction:
 * what a publish costs on it is the publisher's own Node.js work only.
 */
export function publishStandIn(): Queryable & { inTransaction(): boolean } {
  let seq = 0;
  return {
    inTransaction: () => true,
    async query<R>(text: string | { values?: unknown[] }, values?: unknown[]) {
      const args = (typeof text === 'string' ? values : text.values) ?? [];
      const ids = Array.isArray(args[0]) ? (args[0] as string[]) : [args[0] as string];
      if (ids.some((id) => typeof id !== 'string')) throw new ValidationError('id', 'stand-in got no ids');
      return { rows: ids.map((id) => ({ id, seq: String(++seq), version: '1', existing: false, same: true })) as R[] };
    },
  } as Queryable & { inTransaction(): boolean };
}
