import {
  ConfigError,
  type ConnectionPool,
  pgBossDb,
  type Queryable,
  quoteIdentifier,
  schemaIdentifier,
  ValidationError,
  validateIdentifier,
  withTransaction,
} from '@ferry/core';
import type { PgBoss } from 'pg-boss';
import { parkQueueName } from './options.js';
import { type ParkedEvent, parkedEventOf } from './parked.js';
import { PARK_HEARTBEAT_SECONDS, readParkedJob } from './parked-job.js';
import { lockKey } from './sql/lock-key.js';
import { orderParked } from './sql/park-order.js';

// `ferry inbox parked move` (issue 43, item 2): earlier releases parked in pg-boss schema `pgboss`;
// an inbox now parks in `<schema>_boss` and works only that queue, so what was parked in the old
// schema waits for a worker that never comes. Retrying it there changes nothing, and running an
// inbox on the old schema parks new events there while others sit in the new one: a key's parked
// events split, and it is stuck. The move puts them where the inbox works, key by key.

export interface MoveParkedOptions {
  /** A pool on the inbox's database (both pg-boss schemas are in it). */
  pool: ConnectionPool;
  /** The schema of the inbox tables. */
  schema: string;
  /** A started pg-boss on the schema the consumer's inboxes work now (their bossSchema). */
  boss: PgBoss;
  /** That schema's name. */
  bossSchema: string;
  /** Where the jobs are now: an old pg-boss schema (earlier releases: `pgboss`). */
  fromBossSchema: string;
  consumer: string;
  /** Only look: the jobs it would move, none moved. */
  dryRun?: boolean;
  /** The movable job ids (sorted) as found at the start; throw to move nothing (the confirmed selection differs). */
  check?(movable: readonly string[]): void;
}

export interface MovedParked {
  /** The jobs it moved (with `dryRun`: would move), in the order they were parked, by key. */
  readonly moved: readonly ParkedEvent[];
  /** Jobs of keys left where they are because an inbox working the old schema is running one of them right now: move again. */
  readonly busy: readonly ParkedEvent[];
  /** Jobs that are not Ferry parked events (another role's): left in the old schema, to discard there. */
  readonly malformed: readonly ParkedEvent[];
}

/** What a job row of the old schema gives (any pg-boss 10+ job table has these columns). */
interface OldJob {
  id: string;
  singleton_key: string | null;
  state: string;
  data: unknown;
  retry_count: number;
  created_on: Date;
  output: unknown;
}

const MOVABLE = ['created', 'retry', 'failed'];

async function oldJobs(q: Queryable, from: string, queue: string, lock: { key: string | null } | undefined): Promise<OldJob[]> {
  const { rows } = await q.query<OldJob>(
    `SELECT id::text AS id, singleton_key, state::text AS state, data, retry_count, created_on, output FROM ${from}.job
      WHERE name = $1 AND state::text IN ('created', 'retry', 'failed', 'active')${lock ? ' AND singleton_key IS NOT DISTINCT FROM $2' : ''}
      ORDER BY created_on, id${lock ? ' FOR UPDATE' : ''}`,
    lock ? [queue, lock.key] : [queue],
  );
  return rows;
}

const asParked = (consumer: string, j: OldJob): ParkedEvent =>
  parkedEventOf(consumer, {
    id: j.id,
    state: j.state,
    data: j.data,
    output: j.output,
    retryCount: j.retry_count,
    createdOn: j.created_on,
  });

/**
 * Moves a consumer's parked jobs from an old pg-boss schema into the one its inboxes work, key by
 * key: in each key's transaction, under the key's `inbox_versions` row lock (the lock the inbox
 * takes to park or apply one), the key's jobs are locked in the old schema, sent to the consumer's
 * queue in the new one (same job id, the same event as parked, due now with fresh attempts) and
 * deleted from the old one, then (`sequential` mode) the key's parked events are sorted into
 * version order across the jobs it has there (`orderParked`). So each job is moved once and
 * in order, a second run finds nothing to move, and an inbox running meanwhile sees a key either
 * before or after its move, never half of it. A key one of whose jobs an inbox on the old schema
 * is running right now stays, whole, for the next run (`busy`). A job that is not a Ferry parked
 * event stays where it is (`malformed`).
 *
 * @example
 * const r = await moveParked({ pool, schema: 'ferry', boss, bossSchema: 'ferry_boss', fromBossSchema: 'pgboss', consumer: 'billing' });
 */
export async function moveParked(options: MoveParkedOptions): Promise<MovedParked> {
  const consumer = validateIdentifier(options.consumer, 'consumer');
  const fromName = validateIdentifier(options.fromBossSchema, 'fromBossSchema');
  const toName = validateIdentifier(options.bossSchema, 'bossSchema');
  if (fromName === toName) {
    throw new ValidationError(
      '--from-boss-schema',
      `--from-boss-schema "${fromName}" is the pg-boss schema the jobs would move into (--boss-schema): name the old schema they are in`,
    );
  }
  const s = schemaIdentifier(options.schema);
  const from = quoteIdentifier(fromName);
  const to = quoteIdentifier(toName);
  const queue = parkQueueName(consumer);
  const empty: MovedParked = { moved: [], busy: [], malformed: [] };
  const { rows: exists } = await options.pool.query<{ t: string | null }>('SELECT to_regclass($1)::text AS t', [`${from}.job`]);
  if (!exists[0]?.t) return empty;
  if (!(await options.boss.getQueue(queue))) {
    throw new ConfigError(
      '--boss-schema',
      `consumer ${consumer} has no parking lot in pg-boss schema "${toName}" yet: start its inbox once with bossSchema "${toName}" (it creates the queue with its policy), then move; or pass the bossSchema its inboxes use as --boss-schema`,
    );
  }
  // The keys and their jobs as found now; each key is then moved in a transaction of its own.
  const byKey = new Map<string | null, OldJob[]>();
  for (const j of await oldJobs(options.pool, from, queue, undefined))
    byKey.set(j.singleton_key, [...(byKey.get(j.singleton_key) ?? []), j]);
  const moved: ParkedEvent[] = [];
  const busy: ParkedEvent[] = [];
  const malformed: ParkedEvent[] = [];
  const movable = new Map<string | null, OldJob[]>();
  for (const [key, jobs] of byKey) {
    const good = jobs.filter((j) => readParkedJob(j.data).kind === 'parked');
    for (const j of jobs) if (readParkedJob(j.data).kind !== 'parked') malformed.push(asParked(consumer, j));
    if (good.some((j) => j.state === 'active')) busy.push(...good.map((j) => asParked(consumer, j)));
    else if (good.length > 0) movable.set(key, good);
  }
  options.check?.(
    [...movable.values()]
      .flat()
      .map((j) => j.id)
      .sort(),
  );
  const keys = [...movable.keys()].sort((a, b) => (a ?? '').localeCompare(b ?? ''));
  if (options.dryRun) {
    for (const key of keys) moved.push(...(movable.get(key) ?? []).map((j) => asParked(consumer, j)));
    return { moved, busy, malformed };
  }
  for (const key of keys) {
    const planned = new Set((movable.get(key) ?? []).map((j) => j.id));
    const first = readParkedJob(movable.get(key)?.[0]?.data);
    const job = first.kind === 'parked' ? first.job : undefined;
    // The key's row lock first, as the inbox takes it (park, park worker): then its jobs.
    const keyed = key !== null && job?.key === key && job.mode !== 'dedupe';
    const done = await withTransaction(options.pool, async (tx) => {
      if (keyed) await lockKey(tx, s, consumer, key);
      const now = await oldJobs(tx, from, queue, { key });
      // An inbox on the old schema took one of them since: the whole key waits for the next run.
      if (now.some((j) => j.state === 'active')) return { moved: [], busy: now.filter((j) => planned.has(j.id)) };
      const out: OldJob[] = [];
      for (const j of now) {
        // Only what was found (and confirmed) at the start: a job parked there since waits for the next run.
        if (!planned.has(j.id) || !MOVABLE.includes(j.state) || readParkedJob(j.data).kind !== 'parked') continue;
        // The same id: a job already in the new schema (a move cut off after its send cannot be, it is one transaction) is not sent twice.
        await options.boss.send(queue, j.data as object, {
          id: j.id,
          ...(j.singleton_key !== null ? { singletonKey: j.singleton_key } : {}),
          heartbeatSeconds: PARK_HEARTBEAT_SECONDS,
          db: pgBossDb(tx),
        });
        await tx.query(`DELETE FROM ${from}.job WHERE name = $1 AND id = $2::uuid`, [queue, j.id]);
        out.push(j);
      }
      if (keyed && job?.mode === 'sequential' && out.length > 0) {
        await orderParked(tx, to, queue, key);
        // The key's parked count covers every event it has parked where its inbox works.
        await tx.query(
          `UPDATE ${s}.inbox_versions SET parked = greatest(parked,
             (SELECT count(*)::int FROM ${to}.job WHERE name = $3 AND singleton_key = $2 AND state::text IN ('created', 'retry', 'active', 'failed')))
            WHERE consumer = $1 AND key = $2`,
          [consumer, key, queue],
        );
      }
      return { moved: out, busy: [] as OldJob[] };
    });
    moved.push(...done.moved.map((j) => asParked(consumer, j)));
    busy.push(...done.busy.map((j) => asParked(consumer, j)));
  }
  return { moved, busy, malformed };
}
