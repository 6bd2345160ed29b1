import type { Queryable } from '@ferry/core';

// `sequential` mode: what holds a key's versions above the recorded one. A key waits for recorded + 1;
// the versions after it wait in `inbox_early` (stored early) or in the parking lot (live jobs of the
// consumer's queue, singleton_key = key), or were discarded (`inbox_versions.skipped`). When nothing
// holds recorded + 1, the key waits for a version that may never come (issue 43, item 1).
//
// No arithmetic on a version: `h.version - 1 = k.version` rather than `k.version + 1`, which would
// overflow at the top of the bigint range (h.version > k.version >= 0, so the subtraction cannot).

/** A key's row as the gap read returns it. */
export interface KeyGapRow {
  consumer: string;
  key: string;
  recorded: string;
  skipped: string[];
  /** Live parked jobs of the key (in this pg-boss schema) and stored early versions above the recorded one. */
  parked: number;
  early: number;
  /** The lowest held version above the recorded one (parked or early), or null. */
  lowest: string | null;
  /** recorded + 1 is held (parked or stored early). */
  next_held: boolean;
  /** The first held versions, lowest first: version, place (`parked`/`early`) and the parked job's id and state. */
  held: Array<{ version: string; place: 'parked' | 'early'; job: string | null; state: string | null }> | null;
}

/** Held versions listed per key at most. */
export const HELD_SHOWN = 20;

/**
 * One read of the gaps of `sequential` keys. `keys` null: every key with parked events or discarded
 * versions (the candidates for a key stuck on a missing version); otherwise those keys, whatever
 * their state. `jobTable` is the quoted `<bossSchema>.job`, or null when there is no parking lot.
 */
export async function readKeyGapRows(
  q: Queryable,
  schemaSql: string,
  jobTable: string | null,
  consumer: string | null,
  keys: readonly string[] | null,
): Promise<KeyGapRow[]> {
  const jobs =
    jobTable === null
      ? ''
      : `UNION ALL
         SELECT k.consumer, k.key, (j.data->>'version')::numeric AS version, 'parked' AS place, j.id::text AS job, j.state::text AS state
           FROM k JOIN ${jobTable} j ON j.name = 'ferry.inbox.' || k.consumer || '.parked' AND j.singleton_key = k.key
          WHERE j.state IN ('created', 'retry', 'active', 'failed') AND j.data->>'version' ~ '^[0-9]{1,19}$'
            AND (j.data->>'version')::numeric > k.version`;
  const { rows } = await q.query<KeyGapRow>(
    `WITH k AS MATERIALIZED (
       SELECT v.consumer, v.key, v.version, v.skipped FROM ${schemaSql}.inbox_versions v
        WHERE ($1::text IS NULL OR v.consumer = $1)
          AND (CASE WHEN $2::text[] IS NULL THEN v.parked > 0 OR v.skipped <> '{}' ELSE v.key = ANY ($2::text[]) END)
     ), held AS MATERIALIZED (
       SELECT k.consumer, k.key, e.version::numeric AS version, 'early' AS place, NULL::text AS job, NULL::text AS state
         FROM k JOIN ${schemaSql}.inbox_early e ON e.consumer = k.consumer AND e.key = k.key AND e.version > k.version
       ${jobs}
     )
     SELECT k.consumer, k.key, k.version::text AS recorded, k.skipped::text[] AS skipped,
            (SELECT count(*)::int FROM held h WHERE h.consumer = k.consumer AND h.key = k.key AND h.place = 'parked') AS parked,
            (SELECT count(*)::int FROM held h WHERE h.consumer = k.consumer AND h.key = k.key AND h.place = 'early') AS early,
            (SELECT min(h.version)::text FROM held h WHERE h.consumer = k.consumer AND h.key = k.key) AS lowest,
            EXISTS (SELECT 1 FROM held h WHERE h.consumer = k.consumer AND h.key = k.key AND h.version - 1 = k.version) AS next_held,
            (SELECT json_agg(x) FROM (SELECT h.version::text AS version, h.place, h.job, h.state FROM held h
                                       WHERE h.consumer = k.consumer AND h.key = k.key ORDER BY h.version, h.place LIMIT ${HELD_SHOWN}) x) AS held
       FROM k ORDER BY k.consumer, k.key`,
    [consumer, keys === null ? null : [...keys]],
  );
  return rows;
}

/**
 * Under the key's row lock: the lowest version in (`above`, `through`] that the key holds (stored
 * early or parked), and where, or undefined. A skip through `through` would otherwise pass over it.
 */
export async function heldWithin(
  tx: Queryable,
  schemaSql: string,
  jobTable: string | null,
  queue: string,
  consumer: string,
  key: string,
  above: bigint,
  through: bigint,
): Promise<{ version: bigint; place: 'parked' | 'early' } | undefined> {
  const jobs =
    jobTable === null
      ? ''
      : `UNION ALL SELECT (j.data->>'version')::numeric, 'parked' FROM ${jobTable} j
          WHERE j.name = $5 AND j.singleton_key = $2 AND j.state IN ('created', 'retry', 'active', 'failed')
            AND j.data->>'version' ~ '^[0-9]{1,19}$' AND (j.data->>'version')::numeric > $3::numeric AND (j.data->>'version')::numeric <= $4::numeric`;
  const { rows } = await tx.query<{ version: string; place: 'parked' | 'early' }>(
    `SELECT h.version::text AS version, h.place FROM (
       SELECT e.version::numeric AS version, 'early' AS place FROM ${schemaSql}.inbox_early e
        WHERE e.consumer = $1 AND e.key = $2 AND e.version > $3::bigint AND e.version <= $4::bigint
       ${jobs}) h(version, place)
      ORDER BY h.version LIMIT 1`,
    jobTable === null
      ? [consumer, key, above.toString(), through.toString()]
      : [consumer, key, above.toString(), through.toString(), queue],
  );
  const r = rows[0];
  return r ? { version: BigInt(r.version), place: r.place } : undefined;
}

/**
 * Records versions up to `through` as done (accepted as lost), then moves on over the versions
 * discarded earlier that follow without a hole (`inbox_next_version`), as the gate does. The caller
 * holds the row lock and has checked that nothing in between is held. Returns the recorded version.
 */
export async function skipThrough(tx: Queryable, schemaSql: string, consumer: string, key: string, through: bigint): Promise<bigint> {
  const next = `${schemaSql}.inbox_next_version($3::bigint, skipped)`;
  const { rows } = await tx.query<{ version: string }>(
    `UPDATE ${schemaSql}.inbox_versions SET version = ${next}, skipped = ARRAY(SELECT x FROM unnest(skipped) AS x WHERE x > ${next}), applied_at = now()
      WHERE consumer = $1 AND key = $2 AND version < $3::bigint RETURNING version::text AS version`,
    [consumer, key, through.toString()],
  );
  return BigInt(rows[0]?.version ?? through.toString());
}

/**
 * Makes the key's waiting or failed parked jobs due now with fresh attempts: their runs failed on
 * the gap the skip closed. (The same reset `orderParked` gives a slot that gets a lower version.)
 * Returns how many jobs changed.
 */
export async function wakeParked(tx: Queryable, bossSchemaSql: string, queue: string, key: string): Promise<number> {
  const b = bossSchemaSql;
  const { rows } = await tx.query<{ id: string }>(
    `UPDATE ${b}.job j
        SET state = 'retry', retry_count = 0, started_on = NULL, start_after = ${b}.job_now(), completed_on = NULL, output = NULL,
            keep_until = greatest(j.keep_until, ${b}.job_now() + (j.keep_until - j.created_on))
      WHERE j.name = $1 AND j.singleton_key = $2 AND j.state IN ('retry', 'failed') RETURNING j.id::text AS id`,
    [queue, key],
  );
  return rows.length;
}
