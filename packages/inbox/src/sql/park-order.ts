import type { Queryable } from '@ferry/core';
import type { ParkedJobData } from '../parked-job.js';

// `sequential` mode: the parking lot keeps a key's parked events in version
// order (issue 28). pg-boss's key_strict_fifo hands out a key's jobs one at a
// time, head first, the head being the key's retry (or failed) job, else its
// oldest created one: creation order, which is not version order when a
// version is parked after its successors (it arrived after the gap timeout,
// another instance parked newer versions during a flush, a retry ran out). So
// Ferry treats a key's live jobs as slots in pg-boss's head order and, under
// the key's `inbox_versions` row lock, writes the key's parked events into
// them sorted by version: whatever pg-boss hands out next is the lowest
// version parked. Every write to a key's parked jobs (park, flush, the park
// worker's fail) runs this under that lock before it commits.

export interface SlotChange {
  id: string;
  /** The event the slot holds now. */
  data: ParkedJobData;
}

/**
 * Sorts a key's parked events into its job slots by version; returns the
 * slots whose event changed. `active` is the park worker's own job (it holds
 * it and has not run it yet, or its run failed): it is the key's first slot.
 * A retry or failed slot that gets a lower version than it held is due now,
 * with fresh attempts: the version that failed there is behind it again.
 * The caller holds the key's row lock.
 *
 * `added`: the job just sent and the version it holds, in a key whose other
 * parked events are in order already. Only the jobs holding a version from
 * it on, or created no earlier than it, are sorted: the old slots before the
 * new job hold an ascending run, so those with a version from it on are the
 * end of that run, and with the new job and every slot after it they make a
 * suffix of the slots whose versions are all at least the ones before. (The
 * new job is not always the last slot: `created_on` is its transaction's
 * start, and a transaction that began later can have taken the key's lock
 * first.) So parking in order costs a look at the key's jobs and no write.
 */
export async function orderParked(
  tx: Queryable,
  bossSchemaSql: string,
  queue: string,
  key: string,
  options: { active?: string; added?: { id: string; version: bigint } } = {},
): Promise<SlotChange[]> {
  const b = bossSchemaSql;
  const { rows } = await tx.query<{ id: string; data: ParkedJobData }>(
    `WITH live AS MATERIALIZED (
       SELECT id, data, state, created_on FROM ${b}.job
        WHERE name = $1 AND singleton_key = $2
          AND (state IN ('created', 'retry', 'failed') OR id = $3::uuid)
          AND ($4::numeric IS NULL OR (data->>'version')::numeric >= $4::numeric
               OR created_on >= (SELECT n.created_on FROM ${b}.job n WHERE n.name = $1 AND n.id = $5::uuid))
        FOR UPDATE),
     slot AS (
       SELECT id, state, data->>'version' AS held,
              row_number() OVER (ORDER BY (state <> 'created') DESC, created_on, id) AS n
         FROM live),
     payload AS (
       SELECT data, row_number() OVER (ORDER BY (data->>'version')::numeric, created_on, id) AS n FROM live)
     UPDATE ${b}.job j
        SET data = p.data,
            state = CASE WHEN s.state = 'failed' THEN 'retry' ELSE j.state END,
            retry_count = CASE WHEN s.state IN ('retry', 'failed') THEN 0 ELSE j.retry_count END,
            started_on = CASE WHEN s.state IN ('retry', 'failed') THEN NULL ELSE j.started_on END,
            start_after = CASE WHEN s.state IN ('retry', 'failed') THEN ${b}.job_now() ELSE j.start_after END,
            completed_on = CASE WHEN s.state IN ('retry', 'failed') THEN NULL ELSE j.completed_on END,
            output = CASE WHEN s.state IN ('retry', 'failed') THEN NULL ELSE j.output END,
            keep_until = CASE WHEN s.state IN ('retry', 'failed')
                              THEN greatest(j.keep_until, ${b}.job_now() + (j.keep_until - j.created_on)) ELSE j.keep_until END
       FROM slot s JOIN payload p USING (n)
      WHERE j.name = $1 AND j.id = s.id AND s.held IS DISTINCT FROM p.data->>'version'
      RETURNING j.id, j.data`,
    [queue, key, options.active ?? null, options.added?.version.toString() ?? null, options.added?.id ?? null],
  );
  return rows;
}
