import { quoteIdentifier } from '@ferry/core';
import { discardParked, type MovedParked, moveParked, retryParked } from '@ferry/inbox';
import type pg from 'pg';
import type { PgBoss } from 'pg-boss';
import { auditMissingReason, isAuditMissing, type Operator, recordAction } from './audit.js';
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
 * events of one consumer, then records the action in operator_actions. The
 * parking lot is pg-boss's, outside the audit's transaction: a record that
 * cannot be written is reported, not fatal, since the change is already made.
 *
 * The jobs are locked and checked against \`expect\` in the change's own
 * transaction (the inbox's ParkedConfirmation): a job retried, applied or
 * failed since the preview makes the whole action change nothing. The audit
 * row names the jobs the action found eligible, locked, and changed.
 */
export async function settleParked(action: ParkedAction, o: SettleParkedOptions): Promise<SettledParked> {
  let changed = 0;
  let outcome = 'ok';
  let failure: unknown;
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
  try {
    changed =
      action === 'retry'
        ? await retryParked({ boss: o.boss, consumer: o.consumer, ids: o.ids, confirm })
        : await discardParked({ boss: o.boss, pool: o.pool, schema: o.schema, consumer: o.consumer, ids: o.ids, confirm });
  } catch (err) {
    failure = err;
    outcome = (err as Error).message ?? String(err);
  }
  let notRecorded: string | undefined;
  try {
    await recordAction(o.pool, quoteIdentifier(o.schema), {
      actor: o.actor,
      via: o.via,
      action: action === 'retry' ? 'parked.retry' : 'parked.discard',
      filter: {
        consumer: o.consumer,
        ids: o.ids,
        ...(o.expect ? { previewed: o.expect.rows ?? null, previewDigest: o.expect.digest } : {}),
        changed: auditSelection(failure === undefined ? [...eligible].sort() : []),
      },
      rows: changed,
      outcome,
    });
  } catch (err) {
    notRecorded = isAuditMissing(err) ? auditMissingReason(o.schema) : (err as Error).message;
  }
  if (failure !== undefined) throw failure;
  return { changed, ...(notRecorded ? { notRecorded } : {}) };
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
 * (`moveParked`), then records the action in operator_actions: the jobs moved, and those left
 * (busy, malformed). As with retry and discard, the record is written after the change (the
 * parking lot is pg-boss's); one that cannot be written is reported, not fatal.
 */
export async function moveParkedAction(o: MoveParkedActionOptions): Promise<MovedParked & { notRecorded?: string }> {
  let result: MovedParked = { moved: [], busy: [], malformed: [] };
  let outcome = 'ok';
  let failure: unknown;
  try {
    result = await moveParked({
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
    });
  } catch (err) {
    failure = err;
    outcome = (err as Error).message ?? String(err);
  }
  let notRecorded: string | undefined;
  try {
    await recordAction(o.pool, quoteIdentifier(o.schema), {
      actor: o.actor,
      via: o.via,
      action: 'parked.move',
      filter: {
        consumer: o.consumer,
        fromBossSchema: o.fromBossSchema,
        bossSchema: o.bossSchema,
        ...(o.expect ? { previewed: o.expect.rows ?? null, previewDigest: o.expect.digest } : {}),
        changed: auditSelection(result.moved.map((p) => p.jobId).sort()),
        ...(result.busy.length > 0 ? { busy: result.busy.length } : {}),
        ...(result.malformed.length > 0 ? { malformed: result.malformed.length } : {}),
      },
      rows: result.moved.length,
      outcome,
    });
  } catch (err) {
    notRecorded = isAuditMissing(err) ? auditMissingReason(o.schema) : (err as Error).message;
  }
  if (failure !== undefined) throw failure;
  return { ...result, ...(notRecorded ? { notRecorded } : {}) };
}
