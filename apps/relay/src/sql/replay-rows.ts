import { OUTBOX_EVENT_COLUMNS } from './outbox-event-columns.js';

/**
 * `ferry replay`'s selection, `where` over the outbox `o` with its values as
 * `$1..$n`: how many rows it holds, and the lowest and highest seq.
 */
export function countReplaySql(schemaSql: string, where: string): string {
  return `SELECT count(*)::text AS n, min(seq)::text AS first, max(seq)::text AS last FROM ${schemaSql}.outbox o WHERE ${where}`;
}

/**
 * One page of `ferry replay`'s selection (`where` with `n` values), in seq
 * order: the rows after seq `$n+1` up to seq `$n+2`, at most `limit`.
 */
export function replayPageSql(schemaSql: string, where: string, n: number, limit: number): string {
  return `SELECT o.seq::text AS seq, ${OUTBOX_EVENT_COLUMNS}
           FROM ${schemaSql}.outbox o WHERE ${where} AND o.seq > $${n + 1}::bigint AND o.seq <= $${n + 2}::bigint
          ORDER BY o.seq LIMIT ${limit}`;
}
