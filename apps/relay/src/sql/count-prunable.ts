/** Published rows older than a retention of `$1` ms: what the next prune would delete (`ferry migrate --dry-run`). */
export function countPrunableSql(schemaSql: string): string {
  return `SELECT count(*)::text AS n FROM ${schemaSql}.outbox_published
        WHERE published_at < now() - $1::bigint * interval '1 millisecond'
          AND NOT EXISTS (SELECT 1 FROM ${schemaSql}.outbox_pending p WHERE p.seq = outbox_published.seq)
          AND EXISTS (SELECT 1 FROM ${schemaSql}.outbox e WHERE e.seq = outbox_published.seq)`;
}

/** The outbox version that moved `published_at` off the event row into `outbox_published`. */
export const PENDING_TABLE_VERSION = 15;

/** `countPrunableSql` for a schema not yet at `PENDING_TABLE_VERSION`, whose rows still carry `published_at` (a dry run before the upgrade). */
export function countPrunableBeforePendingTableSql(schemaSql: string): string {
  return `SELECT count(*)::text AS n FROM ${schemaSql}.outbox
        WHERE published_at < now() - $1::bigint * interval '1 millisecond'`;
}
