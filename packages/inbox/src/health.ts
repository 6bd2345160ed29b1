import { type Queryable, quoteIdentifier, validateIdentifier } from '@ferry/core';

/** One consumer's parked events, as `ferry status` and `ferry doctor` count them. */
export interface ConsumerHealth {
  readonly consumer: string;
  /** Parked events not yet applied or discarded (waiting, being retried, or failed). */
  readonly parked: number;
  /** Of those, the failed ones: each holds its key until `ferry inbox parked retry` or `discard`. */
  readonly failedParked: number;
  /**
   * `sequential` keys waiting on a version that nothing holds: the key's next version is neither
   * in `inbox_early` nor parked, while a later one is parked. It never applies by itself.
   */
  readonly keysWaitingOnMissingVersion: number;
}

/** One inbox's heartbeat row (inbox migration 000008). */
export interface InboxInstance {
  readonly instance: string;
  readonly consumer: string;
  readonly stream: string;
  readonly mode: string;
  /** The Ferry release the inbox runs (its package version). */
  readonly release: string;
  readonly host: string | null;
  readonly pid: number | null;
  readonly startedAt: string;
  /** Its last heartbeat. */
  readonly lastHeartbeatAt: string;
  readonly lastHeartbeatAgeSeconds: number;
  /** Three heartbeat intervals passed without one: killed, frozen or cut off (a clean stop deletes the row). */
  readonly stale: boolean;
}

export interface InboxHealth {
  readonly schema: string;
  readonly bossSchema: string;
  /** Consumers with parked events or keys waiting on a missing version; none listed when all is well. */
  readonly consumers: ConsumerHealth[];
  readonly instances: InboxInstance[];
  /** Why part of it could not be read (a schema before inbox migration 000008, no pg-boss yet, a role without SELECT), or null. */
  readonly note: string | null;
}

const PARK_QUEUE_PATTERN = '^ferry\\.inbox\\.([a-z_][a-z0-9_]{0,62})\\.parked$';
/** pg-boss states of a parked job that is neither applied nor discarded (parked.ts's LIVE_STATES). */
const LIVE = `('created', 'retry', 'active', 'failed')`;

/**
 * Per consumer: parked events, failed ones, and `sequential` keys waiting on a version nothing
 * holds. A key counts when its next version (recorded + 1) is in neither `inbox_early` nor the
 * parking lot, and a later version is parked: parked, not only stored early, since a version held
 * in `inbox_early` within the inbox's gapTimeoutMs is a normal wait for a late one. Versions are
 * compared as numeric, so a key at 2^63-1 overflows nothing. `$1` the parking lot's queue pattern.
 */
function consumerHealthSql(s: string, boss: string): string {
  return `WITH jobs AS (
  SELECT substring(j.name FROM $1) AS consumer, j.state::text AS state, j.data
    FROM ${boss}.job j
   WHERE j.name LIKE 'ferry.inbox.%.parked' AND j.state::text IN ${LIVE}
),
parked_versions AS (
  SELECT j.consumer, j.data ->> 'key' AS key, (j.data ->> 'version')::numeric AS version
    FROM jobs j
   WHERE j.data ->> 'mode' = 'sequential' AND j.data ->> 'key' IS NOT NULL AND j.data ->> 'version' ~ '^[0-9]{1,19}$'
),
held AS (
  SELECT e.consumer, e.key, e.version::numeric AS version, false AS parked FROM ${s}.inbox_early e
  UNION ALL
  SELECT p.consumer, p.key, p.version, true FROM parked_versions p
),
waiting AS (
  SELECT h.consumer, h.key
    FROM held h
    LEFT JOIN ${s}.inbox_versions v ON v.consumer = h.consumer AND v.key = h.key
   GROUP BY h.consumer, h.key, v.version
  HAVING NOT bool_or(h.version = coalesce(v.version, 0)::numeric + 1)
     AND bool_or(h.parked AND h.version > coalesce(v.version, 0)::numeric + 1)
),
counts AS (
  SELECT j.consumer, count(*)::int AS parked, (count(*) FILTER (WHERE j.state = 'failed'))::int AS failed, 0 AS waiting
    FROM jobs j WHERE j.consumer IS NOT NULL GROUP BY j.consumer
  UNION ALL
  SELECT w.consumer, 0, 0, count(*)::int FROM waiting w GROUP BY w.consumer
)
SELECT c.consumer, sum(c.parked)::int AS parked, sum(c.failed)::int AS failed, sum(c.waiting)::int AS waiting
  FROM counts c GROUP BY c.consumer ORDER BY c.consumer`;
}

function instancesSql(s: string): string {
  return `SELECT i.instance, i.consumer, i.stream, i.mode, i.release, i.host, i.pid, i.started_at, i.seen_at,
       extract(epoch FROM now() - i.seen_at)::float8 AS age, i.expires_at <= now() AS stale
  FROM ${s}.inbox_instances i
 ORDER BY i.consumer, i.started_at, i.instance`;
}

/**
 * What `ferry status`, `ferry doctor` and the console show of the inboxes that keep their tables in
 * `schema`: per consumer, parked events, failed ones and keys waiting on a missing version; and
 * every inbox's heartbeat. `null` when the schema holds no inbox tables. Reads only.
 */
export async function readInboxHealth(db: Queryable, options: { schema: string; bossSchema: string }): Promise<InboxHealth | null> {
  const schema = validateIdentifier(options.schema, 'schema');
  const bossSchema = validateIdentifier(options.bossSchema, 'bossSchema');
  const s = quoteIdentifier(schema);
  const { rows } = await db.query<{ versions: boolean; readable: boolean; instances: boolean; boss: boolean }>(
    // to_regclass raises on a schema the role may not use (a reader role and the inboxes' pg-boss): each
    // lookup runs only behind that schema's USAGE check.
    `WITH u AS (
       SELECT coalesce(bool_or(n.nspname = $4 AND has_schema_privilege(n.oid, 'USAGE')), false) AS own,
              coalesce(bool_or(n.nspname = $5 AND has_schema_privilege(n.oid, 'USAGE')), false) AS boss
         FROM pg_catalog.pg_namespace n WHERE n.nspname IN ($4, $5))
     SELECT CASE WHEN u.own THEN to_regclass($1) IS NOT NULL ELSE false END AS versions,
            CASE WHEN u.own THEN to_regclass($1) IS NOT NULL AND has_table_privilege(to_regclass($1), 'SELECT') ELSE false END AS readable,
            CASE WHEN u.own THEN to_regclass($2) IS NOT NULL AND has_table_privilege(to_regclass($2), 'SELECT') ELSE false END AS instances,
            CASE WHEN u.boss THEN to_regclass($3) IS NOT NULL AND has_table_privilege(to_regclass($3), 'SELECT') ELSE false END AS boss
       FROM u`,
    [`${s}.inbox_versions`, `${s}.inbox_instances`, `${quoteIdentifier(bossSchema)}.job`, schema, bossSchema],
  );
  const found = rows[0];
  if (!found?.versions) return null;
  const notes: string[] = [];
  if (!found.readable) notes.push(`this role may not read ${schema}.inbox_versions: parked events not counted`);
  else if (!found.boss) notes.push(`no readable pg-boss schema "${bossSchema}" (pass the inbox's bossSchema): parked events not counted`);
  if (!found.instances) notes.push(`no readable ${schema}.inbox_instances (inbox migration 8: ferry migrate --inbox): inboxes not listed`);
  const [consumers, instances] = await Promise.all([
    found.readable && found.boss
      ? db.query<{ consumer: string; parked: number; failed: number; waiting: number }>(consumerHealthSql(s, quoteIdentifier(bossSchema)), [
          PARK_QUEUE_PATTERN,
        ])
      : { rows: [] },
    found.instances
      ? db.query<{
          instance: string;
          consumer: string;
          stream: string;
          mode: string;
          release: string;
          host: string | null;
          pid: number | null;
          started_at: Date;
          seen_at: Date;
          age: number;
          stale: boolean;
        }>(instancesSql(s))
      : { rows: [] },
  ]);
  return {
    schema,
    bossSchema,
    consumers: consumers.rows.map((r) => ({
      consumer: r.consumer,
      parked: r.parked,
      failedParked: r.failed,
      keysWaitingOnMissingVersion: r.waiting,
    })),
    instances: instances.rows.map((r) => ({
      instance: r.instance,
      consumer: r.consumer,
      stream: r.stream,
      mode: r.mode,
      release: r.release,
      host: r.host,
      pid: r.pid,
      startedAt: r.started_at.toISOString(),
      lastHeartbeatAt: r.seen_at.toISOString(),
      lastHeartbeatAgeSeconds: Math.round(Math.max(0, r.age) * 1000) / 1000,
      stale: r.stale,
    })),
    note: notes.length > 0 ? notes.join('; ') : null,
  };
}
