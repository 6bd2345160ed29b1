import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describeValue, MigrationError, ValidationError } from './errors.js';
import { quoteIdentifier, validateIdentifier } from './identifiers.js';
import type { ConnectionPool, Queryable } from './queryable.js';
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
}

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
    .map((m) => ({ set, version: Number(m[1]), name: m[2] ?? '', template: readFileSync(`${dir}${m[0]}`, 'utf8') }))
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
  // Only what a database at `from` still needs: the earlier ones would fail on it ("relation … already exists").
  for (const m of listMigrations(set).filter((x) => x.version > from)) {
    parts.push(`-- ${set} ${String(m.version).padStart(6, '0')}_${m.name}`, render(m.template, schema, lanes).trim());
    parts.push(
      `INSERT INTO ${quoteIdentifier(schema)}.migrations (migration_set, version, name) VALUES ('${set}', ${m.version}, '${m.name}') ON CONFLICT DO NOTHING;`,
    );
  }
  parts.push('COMMIT;', '');
  return parts.join('\n');
}

/**
 * Applies the set's missing migrations in one transaction under an advisory
 * lock: concurrent runs serialise, the later one finds nothing to do. A
 * database migrated by a newer Ferry is refused.
 */
export async function migrate(options: MigrateOptions): Promise<MigrateResult> {
  const schema = validateIdentifier(options.schema ?? DEFAULT_SCHEMA, 'schema');
  const set = validateSet(options.set ?? 'outbox');
  if (options.lanes !== undefined) validateLanes(options.lanes);
  const migrations = listMigrations(set);
  const latest = migrations.at(-1)?.version ?? 0;
  const s = quoteIdentifier(schema);
  return withTransaction(options.pool, async (client) => {
    await client.query('SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))', ['ferry:migrate', schema]);
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
    let lanes = options.lanes ?? DEFAULT_LANES;
    if (set === 'outbox' && done.size > 0) {
      const stored = await client.query<{ value: string }>(laneCountSql(s));
      const current = Number(stored.rows[0]?.value ?? DEFAULT_LANES);
      if (options.lanes !== undefined && options.lanes !== current) {
        throw new MigrationError(
          `schema "${schema}" already has ${current} lanes; lanes are fixed by the first migrate (asked for ${options.lanes}). Omit --lanes, or migrate a new schema`,
        );
      }
      lanes = current;
    }
    const applied: Array<{ version: number; name: string }> = [];
    for (const m of migrations) {
      if (done.has(m.version)) continue;
      try {
        await client.query(render(m.template, schema, lanes));
      } catch (err) {
        throw new MigrationError(`${set} migration ${m.version} (${m.name}) failed on schema "${schema}": ${(err as Error).message}`, {
          cause: err,
        });
      }
      await client.query(`INSERT INTO ${s}.migrations (migration_set, version, name) VALUES ($1, $2, $3)`, [set, m.version, m.name]);
      applied.push({ version: m.version, name: m.name });
    }
    return { schema, set, applied, version: latest };
  });
}

/** Columns that tell Ferry's own tables from same-named ones something else created. */
const FERRY_COLUMNS: ReadonlyMap<string, readonly string[]> = new Map([
  ['migrations', ['migration_set', 'version', 'name']],
  ['outbox', ['seq', 'id', 'key', 'version', 'lane', 'subject', 'published_at', 'dead_at']],
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
