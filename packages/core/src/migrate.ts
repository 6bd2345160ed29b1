import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describeValue, MigrationError, ValidationError } from './errors.js';
import { quoteIdentifier, validateIdentifier } from './identifiers.js';
import { type ConnectionPool, guardConnection, type PooledConnection, type Queryable } from './queryable.js';
import { withTransaction } from './transaction.js';

/** The independent migration sets: producer side, consumer side, request edge. */
export const MIGRATION_SETS = ['outbox', 'inbox', 'idempotency'] as const;
export type MigrationSet = (typeof MIGRATION_SETS)[number];

export const DEFAULT_SCHEMA = 'ferry';
export const DEFAULT_LANES = 16;
export const MAX_LANES = 1024;

/** The lane count fixed at the first outbox migrate (one row, `value` text); `schemaSql` is already quoted. */
export function laneCountSql(schemaSql: string): string {
  return `SELECT value FROM ${schemaSql}.settings WHERE name = 'lanes'`;
}

export interface Migration {
  readonly set: MigrationSet;
  readonly version: number;
  readonly name: string;
  /** SQL with `:SCHEMA` (and `:LANES`) placeholders. */
  readonly template: string;
  /**
   * False for a file whose first line is `-- ferry:no-transaction`: its statements run one by one
   * outside a transaction (index builds on the outbox, `CREATE INDEX CONCURRENTLY`), each ending
   * with `;` at the end of a line.
   */
  readonly transactional: boolean;
}

/** The first line of a migration that runs outside a transaction. */
const NO_TRANSACTION = /^-- ferry:no-transaction\b/;

export interface MigrateOptions {
  pool: ConnectionPool;
  /** Default `ferry`. */
  schema?: string;
  /** Default `outbox`. */
  set?: MigrationSet;
  /** Outbox lanes, fixed by the first migrate (default 16). */
  lanes?: number;
}

export interface MigrateResult {
  readonly schema: string;
  readonly set: MigrationSet;
  /** Migrations this call applied, in order; empty when already current. */
  readonly applied: ReadonlyArray<{ version: number; name: string }>;
  readonly version: number;
}

const MIGRATIONS_DIR = fileURLToPath(new URL('../migrations/', import.meta.url));
const FILE = /^(\d{6})_([a-z0-9_]+)\.sql$/;

function validateSet(set: unknown): MigrationSet {
  if (!MIGRATION_SETS.includes(set as MigrationSet)) {
    throw new ValidationError('set', `unknown migration set ${describeValue(set)}; use one of ${MIGRATION_SETS.join(', ')}`);
  }
  return set as MigrationSet;
}

export function validateLanes(lanes: unknown): number {
  if (typeof lanes !== 'number' || !Number.isInteger(lanes) || lanes < 1 || lanes > MAX_LANES) {
    throw new ValidationError('lanes', `lanes must be an integer from 1 to ${MAX_LANES}, got ${describeValue(lanes)}`);
  }
  return lanes;
}

/** The migrations Ferry ships for a set, in order. */
export function listMigrations(set: MigrationSet = 'outbox'): Migration[] {
  validateSet(set);
  const dir = `${MIGRATIONS_DIR}${set}/`;
  let files: string[];
  try {
    files = readdirSync(dir);
  } catch {
    return [];
  }
  return files
    .map((f) => FILE.exec(f))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => {
      const template = readFileSync(`${dir}${m[0]}`, 'utf8');
      return { set, version: Number(m[1]), name: m[2] ?? '', template, transactional: !NO_TRANSACTION.test(template) };
    })
    .sort((a, b) => a.version - b.version);
}

function render(template: string, schema: string, lanes: number): string {
  // Placeholders are replaced in statements only: a comment line that explains them
  // ("-- :SCHEMA is replaced by the quoted schema name") read '"ferry" is replaced by …' in --print-sql.
  return template
    .split('\n')
    .map((line) => (/^\s*--/.test(line) ? line : line.replaceAll(':SCHEMA', quoteIdentifier(schema)).replaceAll(':LANES', String(lanes))))
    .join('\n');
}

/** The statements of a rendered `-- ferry:no-transaction` migration, comments left out, one per `;` at a line's end. */
function statementsOf(sql: string): string[] {
  return sql
    .split('\n')
    .filter((line) => !/^\s*--/.test(line))
    .join('\n')
    .split(/;[ \t]*(?:\n|$)/)
    .map((x) => x.trim())
    .filter((x) => x.length > 0);
}

/** What --print-sql says before a migration that runs outside a transaction. */
const NO_TRANSACTION_NOTE = `-- Outside a transaction: CREATE INDEX CONCURRENTLY cannot run in one. Built inside one, an index on
-- the outbox held a lock that made every publish (an insert) wait until the build ended; built
-- concurrently, publishes go on. Apply this script with psql, which sends one statement at a time
-- (a multi-statement string is one implicit transaction, and PostgreSQL refuses it).`;

function bookkeepingSql(schema: string): string {
  const s = quoteIdentifier(schema);
  return `CREATE SCHEMA IF NOT EXISTS ${s};
CREATE TABLE IF NOT EXISTS ${s}.migrations (
  migration_set text NOT NULL,
  version    integer NOT NULL,
  name       text NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (migration_set, version)
);`;
}

/**
 * The SQL a DBA can apply by hand: the same statements `migrate` runs for the
 * migrations after `fromVersion` (default 0: all of them, for a new
 * database), recorded in `<schema>.migrations` so a later `ferry migrate`
 * sees them.
 */
export function migrationSql(options: { schema?: string; set?: MigrationSet; lanes?: number; fromVersion?: number } = {}): string {
  const schema = validateIdentifier(options.schema ?? DEFAULT_SCHEMA, 'schema');
  const set = validateSet(options.set ?? 'outbox');
  const lanes = validateLanes(options.lanes ?? DEFAULT_LANES);
  const from = options.fromVersion ?? 0;
  if (!Number.isInteger(from) || from < 0) {
    throw new ValidationError('fromVersion', `fromVersion must be the version a database is at (0 or more), got ${describeValue(from)}`);
  }
  const latest = listMigrations(set).at(-1)?.version ?? 0;
  if (from > latest) {
    throw new MigrationError(`${set} version ${from} is newer than this Ferry knows (up to ${latest}): upgrade Ferry`);
  }
  const parts = [
    `-- Ferry ${set} migrations for schema ${schema}, from version ${from} to ${latest}${from === latest ? ': nothing to apply' : ''}`,
    'BEGIN;',
    bookkeepingSql(schema),
  ];
  let open = true;
  // Only what a database at `from` still needs: the earlier ones would fail on it ("relation … already exists").
  for (const m of listMigrations(set).filter((x) => x.version > from)) {
    if (m.transactional && !open) parts.push('BEGIN;');
    if (!m.transactional && open) parts.push('COMMIT;', NO_TRANSACTION_NOTE);
    open = m.transactional;
    parts.push(`-- ${set} ${String(m.version).padStart(6, '0')}_${m.name}`, render(m.template, schema, lanes).trim());
    parts.push(
      `INSERT INTO ${quoteIdentifier(schema)}.migrations (migration_set, version, name) VALUES ('${set}', ${m.version}, '${m.name}') ON CONFLICT DO NOTHING;`,
    );
  }
  if (open) parts.push('COMMIT;');
  parts.push('');
  return parts.join('\n');
}

/**
 * Applies the set's missing migrations under an advisory lock: concurrent runs
 * serialise, the later one finds nothing to do. A database migrated by a newer
 * Ferry is refused. Consecutive migrations commit together in one transaction,
 * each recorded with its changes; a `-- ferry:no-transaction` migration (an
 * index build on the outbox, concurrent so publishes go on) runs statement by
 * statement between them and is recorded when all of them ran, so a run cut
 * short in one is finished by the next (its first statement drops a half-built
 * index).
 *
 * The lock is a session lock on the one connection every step runs on, taken
 * by polling `pg_try_advisory_lock`: a run blocked in `pg_advisory_lock` would
 * hold a snapshot, which `CREATE INDEX CONCURRENTLY` waits for, while it waits
 * for the lock the index build's session holds.
 */
export async function migrate(options: MigrateOptions): Promise<MigrateResult> {
  const schema = validateIdentifier(options.schema ?? DEFAULT_SCHEMA, 'schema');
  const set = validateSet(options.set ?? 'outbox');
  if (options.lanes !== undefined) validateLanes(options.lanes);
  const client = await options.pool.connect();
  const release = guardConnection(client);
  let broken: Error | undefined;
  try {
    await lockMigrations(client, schema);
    try {
      return await applyMigrations(client, schema, set, options.lanes);
    } finally {
      await client.query('SELECT pg_advisory_unlock(hashtext($1), hashtext($2))', MIGRATE_LOCK(schema)).catch((err: Error) => {
        broken = err; // the session ends with the connection, and its lock with it
      });
    }
  } finally {
    release(broken);
  }
}

const MIGRATE_LOCK = (schema: string) => ['ferry:migrate', schema];

async function lockMigrations(client: Queryable, schema: string): Promise<void> {
  for (let wait = 20; ; wait = Math.min(500, wait * 2)) {
    const { rows } = await client.query<{ ok: boolean }>(
      'SELECT pg_try_advisory_lock(hashtext($1), hashtext($2)) AS ok',
      MIGRATE_LOCK(schema),
    );
    if (rows[0]?.ok) return;
    await new Promise((resolve) => setTimeout(resolve, wait));
  }
}

/** One connection as a pool, so the transactions of a run go through `withTransaction` on the connection that holds the lock. */
function onConnection(client: PooledConnection): ConnectionPool {
  const same: PooledConnection = { query: (text, values) => client.query(text, values), release: () => {} };
  return { query: same.query, connect: async () => same };
}

async function applyMigrations(
  client: PooledConnection,
  schema: string,
  set: MigrationSet,
  askedLanes: number | undefined,
): Promise<MigrateResult> {
  const migrations = listMigrations(set);
  const latest = migrations.at(-1)?.version ?? 0;
  const s = quoteIdentifier(schema);
  // Before anything is created or read: another application's migrations/outbox table failed
  // here on a missing column (exit 1), or on "relation already exists".
  const foreign = await foreignTables(client, schema);
  if (foreign.length > 0) throw foreignTablesError(schema, foreign);
  await client.query(bookkeepingSql(schema));
  const { rows } = await client.query<{ version: number }>(`SELECT version FROM ${s}.migrations WHERE migration_set = $1`, [set]);
  const done = new Set(rows.map((r) => r.version));
  const newest = Math.max(0, ...done);
  if (newest > latest) {
    throw new MigrationError(
      `schema "${schema}" was migrated by a newer Ferry (${set} migration ${newest}; this Ferry knows up to ${latest}): upgrade Ferry, or point it at another schema`,
    );
  }
  let lanes = askedLanes ?? DEFAULT_LANES;
  if (set === 'outbox' && done.size > 0) {
    const stored = await client.query<{ value: string }>(laneCountSql(s));
    const current = Number(stored.rows[0]?.value ?? DEFAULT_LANES);
    if (askedLanes !== undefined && askedLanes !== current) {
      throw new MigrationError(
        `schema "${schema}" already has ${current} lanes; lanes are fixed by the first migrate (asked for ${askedLanes}). Omit --lanes, or migrate a new schema`,
      );
    }
    lanes = current;
  }
  const record = (db: Queryable, m: Migration) =>
    db.query(`INSERT INTO ${s}.migrations (migration_set, version, name) VALUES ($1, $2, $3)`, [set, m.version, m.name]);
  const failed = (m: Migration, err: unknown, hint = '') =>
    new MigrationError(`${set} migration ${m.version} (${m.name}) failed on schema "${schema}": ${(err as Error).message}${hint}`, {
      cause: err,
    });
  const applied: Array<{ version: number; name: string }> = [];
  // A new schema: nothing publishes into an outbox this run creates, while a concurrent index build
  // waits for every older snapshot in the whole database (any long transaction of any application,
  // every open transaction of a busy test suite). So a first migrate builds its indexes plainly, in
  // one transaction as before; CONCURRENTLY is for an outbox that already holds rows and writers.
  const fresh = done.size === 0;
  const pending = migrations
    .filter((m) => !done.has(m.version))
    .map((m) => (fresh && !m.transactional ? { ...m, transactional: true, template: m.template.replace(/\bCONCURRENTLY\s+/g, '') } : m));
  while (pending.length > 0) {
    const first = pending[0] as Migration;
    if (!first.transactional) {
      pending.shift();
      for (const statement of statementsOf(render(first.template, schema, lanes))) {
        try {
          await client.query(statement);
        } catch (err) {
          throw failed(first, err, ' (nothing of it is recorded: run ferry migrate again, it starts this migration over)');
        }
      }
      await record(client, first);
      applied.push({ version: first.version, name: first.name });
      continue;
    }
    const batch = pending.splice(
      0,
      pending.findIndex((m) => !m.transactional) === -1 ? pending.length : pending.findIndex((m) => !m.transactional),
    );
    await withTransaction(onConnection(client), async (tx) => {
      for (const m of batch) {
        try {
          await tx.query(render(m.template, schema, lanes));
        } catch (err) {
          throw failed(m, err);
        }
        await record(tx, m);
      }
    });
    applied.push(...batch.map((m) => ({ version: m.version, name: m.name })));
  }
  return { schema, set, applied, version: latest };
}

/** Columns that tell Ferry's own tables from same-named ones something else created. */
const FERRY_COLUMNS: ReadonlyMap<string, readonly string[]> = new Map([
  ['migrations', ['migration_set', 'version', 'name']],
  ['outbox', ['seq', 'id', 'key', 'version', 'lane', 'subject', 'occurred_at', 'created_at']],
]);

/**
 * Tables (or views) named like Ferry's in `schema` that lack Ferry's columns:
 * another application's `migrations` or `outbox`. Ferry must not touch them
 * and cannot read them; every command that meets one says so instead of
 * failing on a missing column.
 */
export async function foreignTables(db: Queryable, schema: string): Promise<string[]> {
  const { rows } = await db.query<{ relname: string; columns: string[] }>(
    `SELECT c.relname::text AS relname, coalesce(array_agg(a.attname::text) FILTER (WHERE a.attname IS NOT NULL), '{}') AS columns
       FROM pg_catalog.pg_class c
       JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
       LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
      WHERE n.nspname = $1 AND c.relname = ANY ($2::text[]) AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
      GROUP BY c.relname ORDER BY c.relname`,
    [validateIdentifier(schema, 'schema'), [...FERRY_COLUMNS.keys()]],
  );
  return rows.filter((r) => !(FERRY_COLUMNS.get(r.relname) ?? []).every((col) => r.columns.includes(col))).map((r) => r.relname);
}

/** The error for a schema with foreign tables (exit 3 in the CLI). */
export function foreignTablesError(schema: string, tables: readonly string[]): MigrationError {
  return new MigrationError(
    `schema "${schema}" holds tables Ferry did not create (${tables.join(', ')}): Ferry leaves them alone; give Ferry a schema of its own with --schema (e.g. ferry)`,
  );
}

/** The set's applied version (0 when never migrated) and the version this Ferry ships. */
export async function migrationStatus(
  db: Queryable,
  options: { schema?: string; set?: MigrationSet } = {},
): Promise<{ current: number; latest: number }> {
  const schema = validateIdentifier(options.schema ?? DEFAULT_SCHEMA, 'schema');
  const set = validateSet(options.set ?? 'outbox');
  const latest = listMigrations(set).at(-1)?.version ?? 0;
  const foreign = await foreignTables(db, schema);
  if (foreign.length > 0) throw foreignTablesError(schema, foreign);
  const exists = await db.query<{ t: string | null }>('SELECT to_regclass($1) AS t', [`${quoteIdentifier(schema)}.migrations`]);
  if (!exists.rows[0]?.t) return { current: 0, latest };
  const { rows } = await db.query<{ v: number | null }>(
    `SELECT max(version) AS v FROM ${quoteIdentifier(schema)}.migrations WHERE migration_set = $1`,
    [set],
  );
  return { current: rows[0]?.v ?? 0, latest };
}
