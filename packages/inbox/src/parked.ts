import {
  type ConnectionPool,
  describeValue,
  pgBossDb,
  type Queryable,
  schemaIdentifier,
  ValidationError,
  validateIdentifier,
  withTransaction,
} from '@ferry/core';
import type { JobWithMetadata, PgBoss } from 'pg-boss';
import { parkQueueName } from './options.js';
import { type ParkedJobData, type ParkedJobRead, readParkedJob } from './parked-job.js';
import { lockKey } from './sql/lock-key.js';
import { addParked, skipVersion } from './sql/park-count.js';
import type { ParkReason } from './types.js';

/** One parked event, as `ferry inbox parked list` shows it. */
export interface ParkedEvent {
  readonly consumer: string;
  readonly jobId: string;
  /** pg-boss state: `created`/`retry` wait for the park worker, `active` is being retried, `failed` holds its key until retried or discarded. */
  readonly state: string;
  readonly key: string | null;
  readonly id: string | null;
  readonly version: string | null;
  readonly type: string | null;
  readonly reason: ParkReason | null;
  /** Why it was parked. */
  readonly error: string | null;
  /** The park worker's last failure, if any. */
  readonly lastError: string | null;
  readonly retryCount: number;
  readonly parkedAt: string;
  /** Set when the job is not a Ferry parked event (written by another role into a shared pg-boss schema): why, and its JSON. */
  readonly malformed?: { readonly problem: string; readonly raw: string };
}

export interface ParkedAdminOptions {
  /** A started pg-boss on the inbox's database and pg-boss schema. */
  boss: PgBoss;
  /** One consumer; all consumers with a park queue when omitted (list only). */
  consumer?: string;
}

const LIVE_STATES = new Set(['created', 'retry', 'active', 'failed']);
/** Parked jobs a discard may delete: waiting or failed, not the one the park worker is running. */
const DISCARDABLE_STATES = new Set(['created', 'retry', 'failed']);
const PAGE = 1000;
const MAX_PAGES = 1000;
const QUEUE = /^ferry\.inbox\.([a-z_][a-z0-9_]{0,62})\.parked$/;

async function consumersOf(options: ParkedAdminOptions): Promise<string[]> {
  if (options.consumer !== undefined) return [validateIdentifier(options.consumer, 'consumer')];
  const queues = await options.boss.getQueues();
  return queues.map((q) => QUEUE.exec(q.name)?.[1]).filter((c): c is string => c !== undefined);
}

/** What `parkedEventOf` reads of a job: pg-boss's `JobWithMetadata` has it; a job row read with plain SQL maps to it. */
export interface ParkedJobFields {
  readonly id: string;
  readonly state: string;
  readonly data: unknown;
  readonly output?: unknown;
  readonly retryCount: number;
  readonly createdOn: Date;
}

/**
 * A parking-lot job as `ferry inbox parked list` shows it (also of a job read with plain SQL, as the
 * move reads an old schema's and the console its page); `read` when the caller decoded `data` already.
 */
export function parkedEventOf(consumer: string, job: ParkedJobFields, read: ParkedJobRead = readParkedJob(job.data)): ParkedEvent {
  const data: Partial<ParkedJobData> = read.kind === 'parked' ? read.job : {};
  const output = job.output as { message?: unknown } | null | undefined;
  return {
    consumer,
    jobId: job.id,
    state: job.state,
    key: data.key ?? null,
    id: data.id ?? null,
    version: data.version ?? null,
    type: data.type ?? null,
    reason: data.reason ?? null,
    error: data.error ?? null,
    lastError: typeof output?.message === 'string' ? output.message : null,
    retryCount: job.retryCount,
    parkedAt: data.parkedAt ?? new Date(job.createdOn).toISOString(),
    ...(read.kind === 'malformed' ? { malformed: { problem: read.problem, raw: read.raw } } : {}),
  };
}

/** Parked events not yet applied or discarded, oldest first. */
export async function listParked(options: ParkedAdminOptions & { limit?: number }): Promise<ParkedEvent[]> {
  const out: ParkedEvent[] = [];
  for (const consumer of await consumersOf(options)) {
    const queue = parkQueueName(consumer);
    if (!(await options.boss.getQueue(queue))) continue;
    // The queue also keeps completed jobs for a while: page through (oldest first) until `limit` live ones.
    const limit = options.limit ?? 1000;
    let found = 0;
    let after: string | undefined;
    for (let page = 0; page < MAX_PAGES && found < limit; page++) {
      const jobs = (await options.boss.findJobs(queue, {
        limit: PAGE,
        ...(after ? { after } : {}),
      })) as unknown as JobWithMetadata<unknown>[];
      for (const job of jobs) {
        if (found < limit && LIVE_STATES.has(job.state)) {
          out.push(parkedEventOf(consumer, job));
          found++;
        }
      }
      if (jobs.length < PAGE) break;
      after = jobs.at(-1)?.id;
    }
  }
  return out;
}

function requireConsumer(options: ParkedAdminOptions): string {
  if (options.consumer === undefined)
    throw new ValidationError('consumer', 'name the consumer whose parked events to change (--consumer NAME)');
  return validateIdentifier(options.consumer, 'consumer');
}

/**
 * A confirmation's check of the exact selection, run inside the change's transaction on the jobs
 * it locked: the ids (sorted) of the given jobs that the action can change now (failed ones for a
 * retry; waiting or failed ones for a discard). It throws to change nothing.
 */
export interface ParkedConfirmation {
  /** The inbox's pg-boss schema (where the jobs are locked). */
  bossSchema: string;
  /** The pool of the transaction (the inbox's database). */
  pool: ConnectionPool;
  check(eligible: readonly string[]): void;
}

/** Locks the given jobs of `queue` in `states`, and returns their ids, sorted. */
async function lockJobs(tx: Queryable, bossSchema: string, queue: string, ids: string[], states: readonly string[]): Promise<string[]> {
  const b = schemaIdentifier(bossSchema, 'bossSchema');
  const { rows } = await tx.query<{ id: string }>(
    `SELECT id::text AS id FROM ${b}.job WHERE name = $1 AND id = ANY ($2::uuid[]) AND state::text = ANY ($3::text[]) ORDER BY id FOR UPDATE`,
    [queue, ids, states],
  );
  return rows.map((r) => r.id).sort();
}

/**
 * Makes failed parked events eligible again now; the park worker retries them through the gate.
 * Returns how many changed. With `confirm`, the failed ones among `ids` are locked and checked in
 * the same transaction as the retry, which then retries exactly those.
 */
export async function retryParked(options: ParkedAdminOptions & { ids: string[]; confirm?: ParkedConfirmation }): Promise<number> {
  const consumer = requireConsumer(options);
  const queue = parkQueueName(consumer);
  const { confirm } = options;
  if (confirm) {
    return withTransaction(confirm.pool, async (tx) => {
      const eligible = await lockJobs(tx, confirm.bossSchema, queue, options.ids, ['failed']);
      confirm.check(eligible);
      if (eligible.length === 0) return 0;
      const result = await options.boss.retry(queue, eligible, { db: pgBossDb(tx) });
      return (result as { affected?: number }).affected ?? 0;
    });
  }
  if (options.ids.length === 0) return 0;
  const result = await options.boss.retry(queue, options.ids);
  return (result as { affected?: number }).affected ?? 0;
}

/**
 * Deletes parked events for good. In `sequential` mode the discarded version,
 * and only it, counts as skipped: the key's later events (parked behind it or
 * still to come) can apply, and an earlier version still missing applies when
 * it arrives (it used to be dropped as stale). Returns how many were discarded.
 *
 * The key's row lock is taken first: the park worker holds it while it applies
 * a parked event and completes its job, so the job's state read under it is
 * final. A completed job is not discarded (its event applied and its parked
 * count was already taken off); one the worker is running now is refused.
 *
 * With `confirm`, every id is discarded in one transaction: the keys' locks
 * (in key order), then the jobs' (the park worker's order), then the check of
 * the exact selection, then the discards, so nothing changes unless the
 * selection is the one confirmed.
 */
export async function discardParked(
  options: ParkedAdminOptions & { ids: string[]; pool: ConnectionPool; schema?: string; confirm?: ParkedConfirmation },
): Promise<number> {
  const consumer = requireConsumer(options);
  const schema = schemaIdentifier(options.schema ?? 'ferry');
  const queue = parkQueueName(consumer);
  const found = new Map<string, ParkedJobData | undefined>();
  for (const id of options.ids) {
    const job = await options.boss.getJobById<unknown>(queue, id);
    if (!job) throw new ValidationError('ids', `no parked event ${describeValue(id)} for consumer ${consumer}`);
    // A malformed job (docs/security.md: another role's) counts nothing and skips nothing: it is only deleted.
    const read = readParkedJob(job.data);
    found.set(id, read.kind === 'parked' && read.job.mode === 'sequential' && read.job.version !== undefined ? read.job : undefined);
  }
  /** Discards one job in `tx`, whose key (when sequential) is locked already; returns 1 or 0. */
  const discardOne = async (tx: Queryable, id: string): Promise<number> => {
    const db = pgBossDb(tx);
    const job = await options.boss.getJobById<unknown>(queue, id, { db });
    if (!job || !DISCARDABLE_STATES.has(job.state)) {
      if (job?.state === 'active') {
        throw new ValidationError('ids', `parked event ${id} is being retried by the park worker right now: discard it again in a moment`);
      }
      return 0; // applied (completed) or gone meanwhile: nothing to discard, nothing to count
    }
    // Read again under the key's lock: the key's versions may have been sorted into other slots meanwhile.
    const read = readParkedJob(job.data);
    const data = read.kind === 'parked' ? read.job : undefined;
    if (found.get(id) !== undefined && data?.key !== undefined && data.version !== undefined) {
      await addParked(tx, schema, consumer, data.key, -1);
      await skipVersion(tx, schema, consumer, data.key, BigInt(data.version));
    }
    const r = await options.boss.deleteJob(queue, id, { db });
    return (r as { affected?: number }).affected ?? 0;
  };
  const keyOf = (id: string) => found.get(id)?.key;
  const { confirm } = options;
  if (confirm) {
    return withTransaction(options.pool, async (tx) => {
      const keys = [...new Set(options.ids.map(keyOf).filter((k): k is string => k !== undefined))].sort();
      for (const key of keys) await lockKey(tx, schema, consumer, key);
      confirm.check(await lockJobs(tx, confirm.bossSchema, queue, options.ids, [...DISCARDABLE_STATES]));
      let discarded = 0;
      for (const id of options.ids) discarded += await discardOne(tx, id);
      return discarded;
    });
  }
  let discarded = 0;
  for (const id of options.ids) {
    discarded += await withTransaction(options.pool, async (tx) => {
      const key = keyOf(id);
      if (key !== undefined) await lockKey(tx, schema, consumer, key);
      return discardOne(tx, id);
    });
  }
  return discarded;
}
