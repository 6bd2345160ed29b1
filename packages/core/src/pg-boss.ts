import { DelegateBackoff, handleWhen, retry } from 'cockatiel';
import { SQLSTATE, sqlState } from './errors.js';
import type { Queryable } from './queryable.js';

/** A start that failed because another process created the pg-boss schema at the same moment. */
function lostCreateRace(err: unknown): boolean {
  return sqlState(err) === SQLSTATE.uniqueViolation || /already exists|pg_namespace_nspname_index/.test(String((err as Error)?.message));
}

/**
 * Starts a pg-boss instance (`() => boss.start()`), again when it lost the
 * race to create its schema: two processes creating `<schema>_boss` at once
 * can fail with a unique violation on `pg_namespace` (or `already exists`),
 * which pg-boss 12 retries only in one of its forms. pg-boss documents a
 * second `start()` after a failure as safe on the same instance; by then the
 * winner's schema exists. Found by two inboxes starting together on a fresh
 * database (test/inbox-gate.test.ts, the racing-deliveries test). At most
 * `attempts` starts, 50 ms × the retry plus up to 100 ms apart.
 */
export async function startPgBoss(start: () => Promise<unknown>, attempts = 5): Promise<void> {
  const policy = retry(handleWhen(lostCreateRace), {
    maxAttempts: attempts - 1,
    backoff: new DelegateBackoff((context: { attempt: number }) => 50 * context.attempt + Math.floor(Math.random() * 100)),
  });
  await policy.execute(() => start());
}

/** The `db` option pg-boss takes (its `IDatabase`), declared here so core needs no pg-boss. */
export interface PgBossDb {
  executeSql(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}

/**
 * pg-boss's `db` over a Ferry connection: a pool (pg-boss then uses no pool of
 * its own), or a transaction, which makes a `send` or `complete` commit or
 * roll back with the caller's writes.
 *
 * @example
 * await boss.send(queue, data, { db: pgBossDb(tx) });
 */
export function pgBossDb(db: Queryable): PgBossDb {
  return { executeSql: (text, values) => db.query(text, values) };
}
