import { spawnSync } from 'node:child_process';
import { bossSchemaFor, idempotencyBossSchemaFor, type MigrationSet, migrate, quoteIdentifier, relayBossSchemaFor } from '@ferry/core';
import pg from 'pg';
import { uniqueName } from './wait.js';

/** The machine's shared PostgreSQL (trust auth). Override with FERRY_TEST_DATABASE_URL. */
export function databaseUrl(): string {
  return process.env.FERRY_TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
}

export interface TestDatabase {
  readonly url: string;
  readonly schema: string;
  readonly pool: pg.Pool;
  /** Drops the schema (and anything in it) and ends the pool. */
  close(): Promise<void>;
}

/**
 * A pool on the shared PostgreSQL and a schema of this test's own, migrated
 * with the given sets. Close it in `after()`.
 */
export async function createTestDatabase(
  options: { prefix?: string; migrate?: MigrationSet[]; lanes?: number; max?: number } = {},
): Promise<TestDatabase> {
  const url = databaseUrl();
  const schema = uniqueName(options.prefix ?? 't');
  const pool = new pg.Pool({ connectionString: url, max: options.max ?? 10 });
  // pool.end() resolves once its clients are removed, before their sockets have closed: a server stopped
  // right after (a benchmark's own cluster, soak.ts) sends those idle clients FATAL 57P01, which pg-pool
  // re-emits on the pool, and an unheard 'error' ended the process after its results were written.
  pool.on('error', () => {});
  for (const set of options.migrate ?? ['outbox']) {
    await migrate({ pool, schema, set, ...(options.lanes === undefined ? {} : { lanes: options.lanes }) });
  }
  if ((options.migrate ?? ['outbox']).length === 0) await pool.query(`CREATE SCHEMA ${quoteIdentifier(schema)}`);
  let closed = false;
  return {
    url,
    schema,
    pool,
    async close() {
      if (closed) return;
      closed = true;
      try {
        await pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(schema)} CASCADE`);
        // Where the inbox's, the relay's and the idempotency janitor's pg-boss go by default.
        for (const boss of [bossSchemaFor(schema), relayBossSchemaFor(schema), idempotencyBossSchemaFor(schema)]) {
          await pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(boss)} CASCADE`);
        }
      } finally {
        await pool.end();
      }
    },
  };
}

/**
 * Applies a SQL script as a DBA would, with psql (one statement at a time, stopping at the first
 * error): `ferry migrate --print-sql` holds statements that refuse to run inside a transaction
 * (CREATE INDEX CONCURRENTLY), and a multi-statement string sent at once is one implicit transaction.
 */
export function applyWithPsql(url: string, sql: string): void {
  const r = spawnSync('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', url, '-f', '-'], { input: sql, encoding: 'utf8' });
  if (r.error) throw new Error(`psql could not run (${r.error.message}): install the PostgreSQL client`, { cause: r.error });
  if (r.status !== 0) throw new Error(`psql exited ${r.status}: ${r.stderr.trim()}`);
}
