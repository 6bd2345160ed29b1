/**
 * Which dead rows a `ferry dlq` command acts on: the ids in `$1`, the key `$1`,
 * or every dead row. Dead: failed for good (`dead_at`) and not discarded
 * (a discarded row is marked published and keeps its `dead_at`).
 */
export const DEAD_SELECTORS = ['ids', 'key', 'all'] as const;
export type DeadSelector = (typeof DEAD_SELECTORS)[number];

/** The WHERE condition of a selection of dead rows of `o`, the outbox. */
export function deadCondition(selector: DeadSelector): string {
  const dead = 'o.dead_at IS NOT NULL AND o.published_at IS NULL';
  if (selector === 'ids') return `o.id = ANY ($1::uuid[]) AND ${dead}`;
  if (selector === 'key') return `${dead} AND o.key = $1`;
  return dead;
}
