import { quoteIdentifier } from '@ferry/core';
import { discardParked, type MovedParked, moveParked, retryParked } from '@ferry/inbox';
import type pg from 'pg';
import type { PgBoss } from 'pg-boss';
import { type ActionName, auditMissingReason, isAuditMissing, type Operator, recordAction } from './audit.js';
import { auditSelection, type ExpectedSelection, SelectionChangedError, sameSelection, selectionOfSet } from './selection.js';

// One implementation of `inbox parked retry|discard|move`, for `ferry inbox` and `ferry console` alike.

export type ParkedAction = 'retry' | 'discard';

export interface SettleParkedOptions extends Operator {
  boss: PgBoss;
  pool: pg.Pool;
  /** The schema of the inbox tables (and of operator_actions). */
  schema: string;
  /** The inbox's pg-boss schema (the parking lot). */
  bossSchema: string;
  consumer: string;
  ids: string[];
  /** The selection the operator confirmed (`selectionOfSet` of the eligible ids a preview showed): anything else changes nothing. */
  expect?: ExpectedSelection;
}

/** The jobs of `ids` a parked action can change now, as a preview shows them: failed ones for a retry, any but the running one for a discard. */
export function parkedEligible(action: ParkedAction, state: string): boolean {
  return action === 'retry' ? state === 'failed' : state === 'created' || state === 'retry' || state === 'failed';
}

export interface SettledParked {
  changed: number;
  /** Why the action is not in the audit trail, when it is not (the inbox's schema has no outbox migrations, or the role may not write it). */
  notRecorded?: string;
}

/**
 * Retries (through the same gate, by the park worker) or discards parked
 * events of one consumer, then records the action in operator_actions
 * (`changeThenRecord`).
 *
 * The jobs are locked and checked against \`expect\` in the change's own
 * transaction (the inbox's ParkedConfirmation): a job retried, applied or
 * failed since the preview makes the whole action change nothing. The audit
 * row names the jobs the action found eligible, locked, and changed.
 */
export async function settleParked(action: ParkedAction, o: SettleParkedOptions): Promise<SettledParked> {
  let eligible: readonly string[] = [];
  const confirm = {
    bossSchema: o.bossSchema,
    pool: o.pool,
    check(ids: readonly string[]) {
      eligible = ids;
      if (o.expect && !sameSelection(o.expect, selectionOfSet(ids))) {
        eligible = [];
        throw new SelectionChangedError(o.expect.rows, ids.length, 'parked event(s)');
      }
    },
  };
  const r = await changeThenRecord(
    o,
    action === 'retry' ? 'parked.retry' : 'parked.discard',
    () =>
      action === 'retry'
        ? retryParked({ boss: o.boss, consumer: o.consumer, ids: o.ids, confirm })
        : discardParked({ boss: o.boss, pool: o.pool, schema: o.schema, consumer: o.consumer, ids: o.ids, confirm }),
    (changed) => ({
      filter: {
        consumer: o.consumer,
        ids: o.ids,
        ...(o.expect ? { previewed: o.expect.rows ?? null, previewDigest: o.expect.digest } : {}),
        changed: auditSelection(changed === undefined ? [] : [...eligible].sort()),
      },
      rows: changed ?? 0,
    }),
  );
  return { changed: r.result, ...(r.notRecorded ? { notRecorded: r.notRecorded } : {}) };
}

/**
 * Makes a change to the parking lot, then records it in operator_actions, whether it succeeded
 * (outcome `ok`) or failed (its message; the error is thrown after). The parking lot is pg-boss's,
 * outside the audit's transaction: a record that cannot be written is reported, not fatal, since
 * the change is already made.
 */
async function changeThenRecord<T>(
  o: Operator & { pool: pg.Pool; schema: string },
  action: ActionName,
  change: () => Promise<T>,
  entry: (result: T | undefined) => { filter: Record<string, unknown>; rows: number },
): Promise<{ result: T; notRecorded?: string }> {
  let result: T | undefined;
  let outcome = 'ok';
  let failure: unknown;
  try {
    result = await change();
  } catch (err) {
    failure = err;
    outcome = (err as Error).message ?? String(err);
  }
  let notRecorded: string | undefined;
  try {
    await recordAction(o.pool, quoteIdentifier(o.schema), { actor: o.actor, via: o.via, action, ...entry(result), outcome });
  } catch (err) {
    notRecorded = isAuditMissing(err) ? auditMissingReason(o.schema) : (err as Error).message;
  }
  if (failure !== undefined) throw failure;
  return { result: result as T, ...(notRecorded ? { notRecorded } : {}) };
}

export interface MoveParkedActionOptions extends Operator {
  boss: PgBoss;
  pool: pg.Pool;
  schema: string;
  /** Where the consumer's inboxes work their parking lot now. */
  bossSchema: string;
  /** The old pg-boss schema the jobs are in. */
  fromBossSchema: string;
  consumer: string;
  /** The selection a preview showed (`selectionOfSet` of the jobs it would move): anything else moves nothing. */
  expect?: ExpectedSelection;
}

/**
 * Moves a consumer's parked jobs from an old pg-boss schema into the one its inboxes work
 * (`moveParked`), then records the action in operator_actions (`changeThenRecord`): the jobs
 * moved, and how many were left (busy, malformed).
 */
export async function moveParkedAction(o: MoveParkedActionOptions): Promise<MovedParked & { notRecorded?: string }> {
  const r = await changeThenRecord(
    o,
    'parked.move',
    () =>
      moveParked({
        pool: o.pool,
        schema: o.schema,
        boss: o.boss,
        bossSchema: o.bossSchema,
        fromBossSchema: o.fromBossSchema,
        consumer: o.consumer,
        check(ids) {
          if (o.expect && !sameSelection(o.expect, selectionOfSet(ids))) {
            throw new SelectionChangedError(o.expect.rows, ids.length, 'parked event(s)');
          }
        },
      }),
    (result) => ({
      filter: {
        consumer: o.consumer,
        fromBossSchema: o.fromBossSchema,
        bossSchema: o.bossSchema,
        ...(o.expect ? { previewed: o.expect.rows ?? null, previewDigest: o.expect.digest } : {}),
        changed: auditSelection((result?.moved ?? []).map((p) => p.jobId).sort()),
        ...(result?.busy.length ? { busy: result.busy.length } : {}),
        ...(result?.malformed.length ? { malformed: result.malformed.length } : {}),
      },
      rows: result?.moved.length ?? 0,
    }),
  );
  return { ...r.result, ...(r.notRecorded ? { notRecorded: r.notRecorded } : {}) };
}
