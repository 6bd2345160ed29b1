import { quoteIdentifier } from '@ferry/core';
import { discardParked, retryParked } from '@ferry/inbox';
import type pg from 'pg';
import type { PgBoss } from 'pg-boss';
import { auditMissingReason, isAuditMissing, type Operator, recordAction } from './audit.js';

// One implementation of `inbox parked retry|discard`, for `ferry inbox` and `ferry console` alike.

export type ParkedAction = 'retry' | 'discard';

export interface SettleParkedOptions extends Operator {
  boss: PgBoss;
  pool: pg.Pool;
  /** The schema of the inbox tables (and of operator_actions). */
  schema: string;
  consumer: string;
  ids: string[];
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
 */
export async function settleParked(action: ParkedAction, o: SettleParkedOptions): Promise<SettledParked> {
  let changed = 0;
  let outcome = 'ok';
  let failure: unknown;
  try {
    changed =
      action === 'retry'
        ? await retryParked({ boss: o.boss, consumer: o.consumer, ids: o.ids })
        : await discardParked({ boss: o.boss, pool: o.pool, schema: o.schema, consumer: o.consumer, ids: o.ids });
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
      filter: { consumer: o.consumer, ids: o.ids },
      rows: changed,
      outcome,
    });
  } catch (err) {
    notRecorded = isAuditMissing(err) ? auditMissingReason(o.schema) : (err as Error).message;
  }
  if (failure !== undefined) throw failure;
  return { changed, ...(notRecorded ? { notRecorded } : {}) };
}
