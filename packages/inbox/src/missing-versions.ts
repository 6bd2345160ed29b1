import {
  type ConnectionPool,
  type PooledConnection,
  type Queryable,
  quoteIdentifier,
  ValidationError,
  validateIdentifier,
  withTransaction,
} from '@ferry/core';
import { parkQueueName } from './options.js';
import { inboxTablesExist } from './sql/inbox-tables.js';
import { heldWithin, type KeyGapRow, readKeyGapRows, skipThrough, wakeParked } from './sql/key-gaps.js';
import { lockKey } from './sql/lock-key.js';

// `sequential` mode: a key applies only recorded + 1, so a version that never reaches the stream
// (lost upstream, pruned from the stream, never published) holds its key for good: its successors
// wait stored early, then parked, and a discard of them only adds to the versions it skips (issue
// 43, item 1). This reads what a key waits for and what holds its later versions, and lets an
// operator accept the missing versions as lost: the key then moves on, and its stored and parked
// successors apply in version order, once (the early-version sweep and the park worker pick them up).

/** A `sequential` key's versions: the one it waits for, and what holds the ones after it. */
export interface KeyGap {
  readonly consumer: string;
  readonly key: string;
  /** The last version applied (or skipped over); 0 when none. */
  readonly recorded: bigint;
  /** The version the key applies next: recorded + 1. */
  readonly waitsFor: bigint;
  /** Whether that version is held (stored early or parked): when it is not, the key waits for it to arrive. */
  readonly nextHeld: boolean;
  /** Versions above the recorded one held in the parking lot (live jobs in the pg-boss schema read) and stored early. */
  readonly parked: number;
  readonly early: number;
  /** Versions an operator discarded above the recorded one (`inbox_versions.skipped`). */
  readonly discarded: readonly bigint[];
  /** The lowest held version (parked or early), first up to 20 of them with where they are. */
  readonly held: ReadonlyArray<{ version: bigint; place: 'parked' | 'early'; jobId: string | null; state: string | null }>;
  /**
   * The versions nothing holds between the recorded one and the lowest held or discarded one: what
   * a skip accepts as lost by default. Undefined when the next version is held, or nothing waits above it.
   */
  readonly missing?: { readonly from: bigint; readonly through: bigint };
  /** The key waits for a version nothing holds while later versions wait for it (held or discarded): it cannot move on by itself. */
  readonly stuck: boolean;
}

export interface KeyGapOptions {
  /** The schema of the inbox tables (default `ferry`). */
  schema?: string;
  /** The inbox's pg-boss schema (its parking lot; default `<schema>_boss`). */
  bossSchema?: string;
  /** One consumer; every consumer when omitted. */
  consumer?: string;
  /** These keys (of `consumer`), whatever their state; by default every key with parked events or discarded versions. */
  keys?: readonly string[];
}

function toGap(r: KeyGapRow): KeyGap {
  const recorded = BigInt(r.recorded);
  const discarded = (r.skipped ?? []).map((x) => BigInt(x)).filter((x) => x > recorded);
  const lowestHeld = r.lowest === null ? undefined : BigInt(r.lowest);
  // The lowest version held or discarded above the recorded one (bigints: no Math.min).
  let above: bigint | undefined = lowestHeld;
  for (const d of discarded) if (above === undefined || d < above) above = d;
  const waitsFor = recorded + 1n;
  const missing = !r.next_held && above !== undefined && above > waitsFor ? { from: waitsFor, through: above - 1n } : undefined;
  return {
    consumer: r.consumer,
    key: r.key,
    recorded,
    waitsFor,
    nextHeld: r.next_held,
    parked: r.parked,
    early: r.early,
    discarded,
    held: (r.held ?? []).map((h) => ({ version: BigInt(h.version), place: h.place, jobId: h.job, state: h.state })),
    ...(missing ? { missing } : {}),
    stuck: missing !== undefined && (r.parked > 0 || discarded.length > 0),
  };
}

async function jobTableOf(q: Queryable, bossSchema: string): Promise<string | null> {
  const table = `${quoteIdentifier(bossSchema)}.job`;
  const { rows } = await q.query<{ t: string | null }>('SELECT to_regclass($1)::text AS t', [table]);
  return rows[0]?.t ? table : null;
}

/**
 * The gaps of `sequential` keys: of the given keys, or of every key with parked events or
 * discarded versions. Empty when the schema has no inbox tables.
 *
 * @example
 * for (const g of await readKeyGaps(pool, { consumer: 'billing', keys: ['order-42'] }))
 *   if (g.missing) console.log(`${g.key} waits for ${g.waitsFor}; nothing holds ${g.missing.from}..${g.missing.through}`);
 */
export async function readKeyGaps(q: Queryable, options: KeyGapOptions = {}): Promise<KeyGap[]> {
  const schema = validateIdentifier(options.schema ?? 'ferry', 'schema');
  const bossSchema = validateIdentifier(options.bossSchema ?? `${schema}_boss`, 'bossSchema');
  const consumer = options.consumer === undefined ? null : validateIdentifier(options.consumer, 'consumer');
  if (options.keys !== undefined && consumer === null)
    throw new ValidationError('consumer', 'name the consumer of the keys (--consumer NAME)');
  if (options.keys?.length === 0) return [];
  if (!(await inboxTablesExist(q, schema))) return [];
  const rows = await readKeyGapRows(q, quoteIdentifier(schema), await jobTableOf(q, bossSchema), consumer, options.keys ?? null);
  return rows.map(toGap);
}

/**
 * Keys that wait for a version nothing holds (not applied, not stored early, not parked) while
 * later versions of theirs are parked or were discarded: they cannot move on until the version
 * arrives (a replay) or an operator accepts it as lost (`skipMissingVersions`).
 */
export async function findStuckKeys(q: Queryable, options: Omit<KeyGapOptions, 'keys'> = {}): Promise<KeyGap[]> {
  return (await readKeyGaps(q, options)).filter((g) => g.stuck);
}

/** What a skip did. */
export interface SkippedVersions {
  readonly consumer: string;
  readonly key: string;
  /** The versions accepted as lost (those in the range not discarded already). */
  readonly from: bigint;
  readonly through: bigint;
  /** The recorded version before and after (after: past `through` and any discarded versions following it). */
  readonly recordedBefore: bigint;
  readonly recorded: bigint;
  /** Waiting or failed parked jobs of the key made due now. */
  readonly woken: number;
}

export interface SkipMissingOptions {
  pool: ConnectionPool;
  schema?: string;
  bossSchema?: string;
  consumer: string;
  key: string;
  /** The last version to accept as lost: every version from the key's next one through this one. */
  through: bigint;
  /**
   * A confirmation's check, under the key's row lock: the key's recorded version now and the range
   * it would skip. It throws to change nothing (the key moved since the preview).
   */
  check?: (now: { recorded: bigint; from: bigint; through: bigint }) => void;
  /** Runs in the skip's transaction before COMMIT (the operator action's audit record). */
  beforeCommit?: (tx: PooledConnection, done: SkippedVersions) => Promise<void>;
}

/**
 * Accepts a `sequential` key's missing versions as lost: every version from the key's next one
 * through `through` counts as applied, so the key's stored early and parked successors apply in
 * version order, once (its failed parked head is made due again, with fresh attempts). Refuses
 * (ValidationError) a range holding a version the inbox has: that one would apply, not be lost.
 * One transaction under the key's row lock.
 *
 * @example
 * await skipMissingVersions({ pool, consumer: 'billing', key: 'order-42', through: 2n });
 */
export async function skipMissingVersions(options: SkipMissingOptions): Promise<SkippedVersions> {
  const schema = validateIdentifier(options.schema ?? 'ferry', 'schema');
  const bossSchema = validateIdentifier(options.bossSchema ?? `${schema}_boss`, 'bossSchema');
  const consumer = validateIdentifier(options.consumer, 'consumer');
  const { key, through } = options;
  if (typeof key !== 'string' || key.length === 0)
    throw new ValidationError('key', 'name the key whose missing versions to skip (--key KEY)');
  if (typeof through !== 'bigint' || through < 1n || through > 9_223_372_036_854_775_807n)
    throw new ValidationError('through', `through must be a version from 1 to 9223372036854775807, got ${String(through)}`);
  const s = quoteIdentifier(schema);
  const queue = parkQueueName(consumer);
  return withTransaction(options.pool, async (tx) => {
    const jobTable = await jobTableOf(tx, bossSchema);
    const row = await lockKey(tx, s, consumer, key);
    const from = row.version + 1n;
    options.check?.({ recorded: row.version, from, through });
    if (through < from) {
      throw new ValidationError(
        'through',
        `nothing to skip: key ${JSON.stringify(key)} of consumer ${consumer} is at version ${row.version} already, and --through ${through} is not above it`,
      );
    }
    const held = await heldWithin(tx, s, jobTable, queue, consumer, key, row.version, through);
    if (held) {
      throw new ValidationError(
        'through',
        `version ${held.version} of key ${JSON.stringify(key)} is ${held.place === 'parked' ? 'parked' : 'stored early'}, so it is not missing: ` +
          (held.version === from
            ? 'the key does not wait for a missing version (retry or discard the parked one: ferry inbox parked list)'
            : `skip through ${held.version - 1n} at most; it applies after that`),
      );
    }
    const recorded = await skipThrough(tx, s, consumer, key, through);
    const woken = jobTable === null ? 0 : await wakeParked(tx, quoteIdentifier(bossSchema), queue, key);
    const done: SkippedVersions = { consumer, key, from, through, recordedBefore: row.version, recorded, woken };
    if (options.beforeCommit) await options.beforeCommit(tx, done);
    return done;
  });
}
