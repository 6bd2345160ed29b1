import { hostname, userInfo } from 'node:os';
import type { Queryable } from '@ferry/core';
import { NotMigratedError } from '../errors.js';

/** Where an operator action came from. */
export type ActionVia = 'cli' | 'console';

/** The action names recorded in `operator_actions.action`. */
export type ActionName = 'dlq.retry' | 'dlq.discard' | 'parked.retry' | 'parked.discard' | 'replay';

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

const UNDEFINED_TABLE = '42P01';

/** An audit write into a schema migrated before the audit table: the fix is `ferry migrate`. */
export function auditTableMissing(schema: string, cause: unknown): NotMigratedError {
  return new NotMigratedError(
    `no operator_actions table in schema "${schema}", where Ferry records every operator action: run ferry migrate --schema ${schema} first`,
    { cause },
  );
}

export function isUndefinedTable(err: unknown): boolean {
  return (err as { code?: string })?.code === UNDEFINED_TABLE;
}

/** Records one action; `q` is the transaction of the change, so both commit or neither. */
export async function recordAction(q: Queryable, schemaSql: string, e: AuditEntry): Promise<void> {
  await q.query(`INSERT INTO ${schemaSql}.operator_actions (actor, via, action, filter, rows, outcome) VALUES ($1, $2, $3, $4, $5, $6)`, [
    e.actor.slice(0, 200),
    e.via,
    e.action,
    JSON.stringify(e.filter),
    e.rows,
    e.outcome.slice(0, 1000),
  ]);
}

/** The newest `limit` actions, newest first (the primary key's index). */
export async function listActions(q: Queryable, schemaSql: string, limit: number): Promise<AuditRow[]> {
  const { rows } = await q.query<AuditRow>(
    `SELECT id::text AS id, at, actor, db_role, via, action, filter, rows, outcome FROM ${schemaSql}.operator_actions ORDER BY id DESC LIMIT $1`,
    [limit],
  );
  return rows;
}
