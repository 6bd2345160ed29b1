import { RELAY_FLOOR_SETTING } from '@ferry/core';

/**
 * Deletes at most `$2` rows published more than `$1` ms ago, oldest first; one
 * bounded batch. What recognises each pruned event (id, seq, version, content
 * digest; not its payload) moves to `published_ids` in the same statement, so
 * a publish of the same id afterwards is still `existing` (outbox migration
 * 000006). The row count is the number of rows pruned. The outbox's delete
 * trigger removes their `outbox_published` rows (outbox migration 000015).
 * A delivery record whose event still has a pending row is not a published
 * event, and one whose event is gone has nothing to prune: neither is
 * written so (the relay's grants and the outbox's triggers), but nothing in
 * the schema forbids them, and a batch of them must not be picked again on
 * every run while the rows behind them wait. `$3` is the pruning relay's
 * protocol: nothing is deleted once the schema's relay floor is above it.
 */
export function prunePublishedSql(schemaSql: string): string {
  return `WITH doomed AS (
  SELECT seq FROM ${schemaSql}.outbox_published
   WHERE published_at < now() - $1::bigint * interval '1 millisecond'
     AND ${admitsRelay(schemaSql)}
     AND NOT EXISTS (SELECT 1 FROM ${schemaSql}.outbox_pending p WHERE p.seq = outbox_published.seq)
     AND EXISTS (SELECT 1 FROM ${schemaSql}.outbox e WHERE e.seq = outbox_published.seq)
   ORDER BY published_at
   LIMIT $2
),
gone AS (
  DELETE FROM ${schemaSql}.outbox o USING doomed d WHERE o.seq = d.seq
  RETURNING o.id, o.seq, o.version,
            ${schemaSql}.event_digest(o.key, o.subject, o.type, o.source, o.content_type, o.data, o.headers) AS digest
)
INSERT INTO ${schemaSql}.published_ids AS p (id, seq, version, digest)
SELECT g.id, g.seq, g.version, g.digest FROM gone g
ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, version = excluded.version, digest = excluded.digest, pruned_at = now()`;
}

/**
 * Forgets at most `$2` pruned ids whose rows were pruned more than `$1` ms
 * ago: an id stays recognised for the retention after its row is gone, so
 * for at least twice the retention after it was published. `$3` as above.
 */
export function pruneRecognisedIdsSql(schemaSql: string): string {
  return `DELETE FROM ${schemaSql}.published_ids p
 WHERE p.id IN (SELECT t.id FROM ${schemaSql}.published_ids t
                 WHERE t.pruned_at < now() - $1::bigint * interval '1 millisecond'
                   AND ${admitsRelay(schemaSql)}
                 ORDER BY t.pruned_at LIMIT $2)`;
}

/**
 * The schema's relay floor (outbox migration 000013) admits relay protocol `$3`. In the delete
 * itself, not only in a check before it: a migration that raises the floor while a prune runs
 * stops the prune's next batch. A relay below the floor is an old release left running after an
 * upgrade; its idea of what may go (which table says "published") is the old schema's.
 */
function admitsRelay(schemaSql: string): string {
  return `coalesce((SELECT s.value::int FROM ${schemaSql}.settings s WHERE s.name = '${RELAY_FLOOR_SETTING}'), 0) <= $3::int`;
}
