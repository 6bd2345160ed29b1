import { boundedOutboxEventColumns } from './outbox-event-columns.js';

/**
 * `ferry replay`'s selection, `where` over the outbox `o` with its values as
 * `$1..$n`: how many rows it holds, and the lowest and highest seq.
 */
export function countReplaySql(schemaSql: string, where: string): string {
  return `SELECT count(*)::text AS n, min(seq)::text AS first, max(seq)::text AS last FROM ${schemaSql}.outbox o WHERE ${where}`;
}

/**
 * One page of `ferry replay`'s selection (`where` with `n` values), in seq
 * order: the rows after seq `$n+1` up to seq `$n+2`, at most `limit`, and
 * only as many as `$n+4` bytes of data and headers hold (the first row always). A row's data
 * is loaded only when it has at most `$n+3` bytes (null otherwise, see
 * boundedOutboxEventColumns). A short page is therefore not the last one.
 */
export function replayPageSql(schemaSql: string, where: string, n: number, limit: number): string {
  const max = `$${n + 3}`;
  return `SELECT p.seq::text AS seq, p.id, p.key, p.version, p.subject, p.type, p.source, p.content_type, p.data, p.data_bytes,
                 p.headers, p.occurred_at
            FROM (
              SELECT o.seq AS seq_n, o.seq, ${boundedOutboxEventColumns(max)},
                     row_number() OVER (ORDER BY o.seq) AS rn,
                     sum(CASE WHEN octet_length(o.data) <= ${max} THEN octet_length(o.data) ELSE 0 END
                         + coalesce(octet_length(o.headers::text), 0))
                       OVER (ORDER BY o.seq ROWS UNBOUNDED PRECEDING) AS loaded
                FROM ${schemaSql}.outbox o WHERE ${where} AND o.seq > $${n + 1}::bigint AND o.seq <= $${n + 2}::bigint
               ORDER BY o.seq LIMIT ${limit}) p
           WHERE p.loaded <= $${n + 4} OR p.rn = 1
           ORDER BY p.seq_n`;
}

/**
 * One page of the ids of `ferry replay`'s selection (`where` with `n` values), in seq order: the
 * rows after seq `$n+1` up to seq `$n+2`, at most `limit`. What a confirmation's digest is
 * computed over (actions/selection.ts), read by seq so a large selection is hashed as it comes.
 */
export function replaySelectionPageSql(schemaSql: string, where: string, n: number, limit: number): string {
  return `SELECT o.seq::text AS seq, o.id::text AS id FROM ${schemaSql}.outbox o
           WHERE ${where} AND o.seq > $${n + 1}::bigint AND o.seq <= $${n + 2}::bigint ORDER BY o.seq LIMIT ${limit}`;
}
