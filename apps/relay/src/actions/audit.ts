import { hostname, userInfo } from 'node:os';
import { type Queryable, SQLSTATE, sqlState } from '@ferry/core';
import { NotMigratedError } from '../errors.js';
import { recordOperatorActionSql } from '../sql/record-operator-action.js';

/** Where an operator action came from. */
export type ActionVia = 'cli' | 'console';

/** The action names recorded in `operator_actions.action`. */
export type ActionName =
  | 'dlq.retry'
  | 'dlq.discard'
  | 'parked.retry'
  | 'parked.discard'
  | 'parked.move'
  | 'inbox.skip'
  | 'replay'
  | 'streams.ensure';

/** Who asked, and through what: every action function takes one. */
export interface Operator {
  /** The console's authenticated user, or the CLI's OS user and host (`cliOperator()`). */
  actor: string;
  via: ActionVia;
}

/** The CLI's operator: the OS user and host running `ferry` (the database role is recorded beside it). */
export function cliOperator(): Operator {
  let user = process.env.USER ?? 'unknown';
  try {
    user = userInfo().username;
  } catch {
    // No passwd entry for this uid (a container): the variable, or unknown.
  }
  return { actor: `${user}@${hostname()}`, via: 'cli' };
}

export interface AuditEntry extends Operator {
  action: ActionName;
  /** The selection as given (ids, key, subject, type, time range, consumer). */
  filter: Record<string, unknown>;
  rows: number;
  /** `ok`, or what went wrong. */
  outcome: string;
}

/** One row of the audit trail, as the console shows it. */
export interface AuditRow {
  id: string;
  at: Date;
  actor: string;
  db_role: string;
  via: ActionVia;
  action: string;
  filter: Record<string, unknown>;
  rows: number;
  outcome: string;
}

/** Why an audit write found no trail: the schema lacks the table (000012) or its recording function (000017). */
export function auditMissingReason(schema: string): string {
  return `no operator_actions audit trail in schema "${schema}" (outbox migrations 000012 and 000017: ferry migrate --schema ${schema} creates it)`;
}

/** An audit write into a schema migrated before the audit trail: the fix is `ferry migrate`. */
export function auditTableMissing(schema: string, cause: unknown): NotMigratedError {
  return new NotMigratedError(
    `no operator_actions audit trail in schema "${schema}", where Ferry records every operator action (outbox migrations 000012 and 000017): run ferry migrate --schema ${schema} first`,
    { cause },
  );
}

/** The audit table (undefined table) or its recording function (undefined function) is not there: a schema to migrate. */
export function isAuditMissing(err: unknown): boolean {
  const code = sqlState(err);
  return code === SQLSTATE.undefinedTable || code === SQLSTATE.undefinedFunction;
}

/**
 * Records one action; `q` is the transaction of the change, so both commit or
 * neither. The database sets the time and the role (`session_user`), and cuts
 * the actor to 200 characters and the outcome to 1,000; the rest is the caller's claim.
 */
export async function recordAction(q: Queryable, schemaSql: string, e: AuditEntry): Promise<void> {
  await q.query(recordOperatorActionSql(schemaSql), [e.actor, e.via, e.action, JSON.stringify(e.filter), e.rows, e.outcome]);
}

/** The newest `limit` actions, newest first (the primary key's index). */
export async function listActions(q: Queryable, schemaSql: string, limit: number): Promise<AuditRow[]> {
  const { rows } = await q.query<AuditRow>(
    `SELECT id::text AS id, at, actor, db_role, via, action, filter, rows, outcome FROM ${schemaSql}.operator_actions ORDER BY id DESC LIMIT $1`,
    [limit],
  );
  return rows;
}
