/**
 * Which dead rows a `ferry dlq` command acts on: the ids in `$1`, the key `$1`,
 * or every dead row. Dead: failed for good (`dead_at`) and not discarded
 * (a discarded row has no pending row: migration 000015). Over `outbox_pending p`
 * joined to the outbox `o`.
 */
export const DEAD_SELECTORS = ['ids', 'key', 'all'] as const;
export type DeadSelector = (typeof DEAD_SELECTORS)[number];

/** The WHERE condition of a selection of dead rows of `o`, the outbox. */
export function deadCondition(selector: DeadSelector): string {
  const dead = 'p.attempts > 0 AND p.dead_at IS NOT NULL';
  if (selector === 'ids') return `o.id = ANY ($1::uuid[]) AND ${dead}`;
  if (selector === 'key') return `${dead} AND o.key = $1`;
  return dead;
}
