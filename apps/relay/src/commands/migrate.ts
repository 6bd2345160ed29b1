import {
  bossSchemaFor,
  ConfigError,
  GRANT_TARGETS,
  type GrantTarget,
  grantsSql,
  idempotencyBossSchemaFor,
  listMigrations,
  type MigrationSet,
  migrate,
  migrationSql,
  migrationStatus,
  quoteIdentifier,
  relayBossSchemaFor,
  startPgBoss,
  validateIdentifier,
} from '@ferry/core';
import { Command, Option } from 'commander';
import pg from 'pg';
import { PgBoss } from 'pg-boss';
import { resolveDatabaseUrl } from '../cli/database.js';
import { parseIntIn, parseLanes, parseSchema, validatorParser } from '../cli/flag-parsers.js';
import { databaseUrlOption, schemaOption } from '../cli/shared-options.js';
import { confirm } from '../confirm.js';
import type { CommandContext } from '../context.js';
import { PRUNE_QUEUE } from '../daemon/janitor.js';
import { formatDuration, parseDuration } from '../duration.js';
import { CommandFailedError, NotConfirmedError } from '../errors.js';
import { redactUrl } from '../redact.js';
import { countPrunableBeforePendingTableSql, countPrunableSql, PENDING_TABLE_VERSION } from '../sql/count-prunable.js';
import { OUTBOX_TABLE_SQL as TABLE_EXISTS_SQL } from '../sql/outbox-table.js';
import { setRetentionSql } from '../sql/retention.js';

const parseRole = validatorParser((value) => validateIdentifier(value, 'role'));
const parseConsumer = validatorParser((value) => validateIdentifier(value, 'consumer'));

/** `--consumer` may be given once per consumer the role runs. */
function collectConsumer(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), parseConsumer(value)];
}

/**
 * Installs (or upgrades) pg-boss in its schema as the migrating role, and for
 * the relay creates the prune queue, so relays and inboxes running as roles
 * without CREATE find everything in place (pg-boss queues Ferry uses are rows,
 * not tables).
 */
async function installBoss(url: string, schema: string, queue: string | undefined): Promise<void> {
  const boss = new PgBoss({ connectionString: url, schema, max: 1, supervise: false, schedule: false, registerInstance: false });
  boss.on('error', () => {});
  await startPgBoss(() => boss.start());
  try {
    if (queue) await boss.createQueue(queue, { retryLimit: 2, expireInSeconds: 15 * 60 });
  } finally {
    await boss.stop({ graceful: false, close: true });
  }
}

/**
 * The idempotency janitor's queue (packages/idempotency/src/janitor.ts names it the same way;
 * the relay app does not depend on that package for one string).
 */
function idempotencyPruneQueue(schema: string): string {
  return `ferry.idempotency.prune.${schema}`;
}

/**
 * Before issue 32 the relay's prune schedule and the idempotency janitor's
 * lived in `<schema>_boss`, beside the inbox's parking lot; both now have a
 * pg-boss of their own. The old schedule there would go on putting a job into
 * a queue no worker reads (at every occurrence, if an inbox in `dedupe` mode
 * runs pg-boss's cron in that schema), so `--boss` removes it, as the owner.
 * Its queue stays: a relay of the old version still running during a rolling
 * upgrade keeps working from it. Nothing happens where that pg-boss does not exist.
 */
async function forgetOldSchedule(pool: pg.Pool, url: string, oldSchema: string, queue: string): Promise<boolean> {
  const { rows } = await pool.query<{ t: string | null }>(TABLE_EXISTS_SQL, [`${quoteIdentifier(oldSchema)}.schedule`]);
  if (!rows[0]?.t) return false;
  const boss = new PgBoss({ connectionString: url, schema: oldSchema, max: 1, supervise: false, schedule: false, registerInstance: false });
  boss.on('error', () => {});
  await startPgBoss(() => boss.start());
  try {
    const had = (await boss.getSchedules(queue)).length > 0;
    if (had) await boss.unschedule(queue);
    return had;
  } finally {
    await boss.stop({ graceful: false, close: true });
  }
}

interface MigrateFlags {
  databaseUrl?: string;
  schema: string;
  inbox?: boolean;
  idempotency?: boolean;
  lanes?: number;
  printSql?: boolean;
  json?: boolean;
  printGrants?: boolean;
  role?: string;
  for?: GrantTarget;
  consumer?: string[];
  boss?: boolean;
  bossSchema?: string;
  retention?: number;
  yes?: boolean;
  fromVersion?: number;
  dryRun?: boolean;
}

/** Below this a retention asks for confirmation (or --yes): it deletes recent history at the next prune. */
const SHORT_RETENTION_MS = 3_600_000;

/** Stores the outbox's one retention, after the checks that keep a slip of the finger from emptying it. */
async function setRetention(pool: pg.Pool, flags: MigrateFlags, ms: number, ctx: CommandContext): Promise<void> {
  if (ms === 0) {
    throw new ConfigError(
      '--retention',
      '--retention 0 would make the next prune delete every published row, which ferry replay and idempotent re-publish need: give a duration such as 7d',
    );
  }
  if (ms < SHORT_RETENTION_MS && !flags.yes) {
    const ok = await confirm(
      `set the outbox retention of schema "${flags.schema}" to ${formatDuration(ms)}: the next prune deletes every published row older than that`,
    );
    if (!ok) throw new NotConfirmedError();
  }
  await pool.query(setRetentionSql(quoteIdentifier(flags.schema)), [ms]);
  ctx.err(`outbox retention of schema "${flags.schema}" is now ${formatDuration(ms)} (every relay's prune job uses it)`);
}

/** `--dry-run`: what `ferry migrate` would do here, changing nothing. */
async function dryRun(pool: pg.Pool, flags: MigrateFlags, set: MigrationSet, ctx: CommandContext): Promise<void> {
  const status = await migrationStatus(pool, { schema: flags.schema, set });
  const pending = listMigrations(set).filter((m) => m.version > status.current);
  let wouldPrune: number | null = null;
  if (flags.retention !== undefined && status.current > 0) {
    const count = status.current >= PENDING_TABLE_VERSION ? countPrunableSql : countPrunableBeforePendingTableSql;
    const { rows } = await pool.query<{ n: string }>(count(quoteIdentifier(flags.schema)), [flags.retention]);
    wouldPrune = Number(rows[0]?.n ?? 0);
  }
  const report = {
    dryRun: true,
    set,
    schema: flags.schema,
    current: status.current,
    wouldApply: pending.map((m) => ({ version: m.version, name: m.name })),
    ...(flags.retention !== undefined ? { retentionMs: flags.retention, wouldPrune } : {}),
  };
  if (flags.json) {
    ctx.out(JSON.stringify(report));
    return;
  }
  ctx.out(
    pending.length === 0
      ? `${set} schema "${flags.schema}" is current (version ${status.current}): nothing to apply`
      : `would apply ${pending.map((m) => `${m.version} ${m.name}`).join(', ')} to ${set} schema "${flags.schema}"`,
  );
  if (flags.retention !== undefined) {
    ctx.out(
      `would set the outbox retention to ${formatDuration(flags.retention)}${wouldPrune === null ? '' : `: the next prune would delete ${wouldPrune} published rows`}`,
    );
  }
}

export function migrateCommand(ctx: CommandContext): Command {
  return new Command('migrate')
    .description('create or upgrade the Ferry tables (idempotent; concurrent runs are safe)')
    .addOption(databaseUrlOption())
    .addOption(schemaOption())
    .addOption(new Option('--inbox', 'migrate the consumer side (inbox_versions, inbox_messages) instead of the outbox'))
    .addOption(new Option('--idempotency', 'migrate the request-edge idempotency keys table instead of the outbox'))
    .addOption(new Option('--lanes <n>', 'outbox lanes, fixed by the first migrate (1-1024, default 16)').argParser(parseLanes))
    .addOption(
      new Option(
        '--retention <duration>',
        "the outbox's retention, one for every relay (e.g. 7d; 0 refused; under 1h asks for confirmation, or --yes)",
      ).argParser(parseDuration),
    )
    .addOption(new Option('--yes', 'do not ask for confirmation (a --retention under 1h)'))
    .addOption(
      new Option(
        '--dry-run',
        'change nothing: show the migrations the database still needs and, with --retention, how many published rows the next prune would delete',
      ),
    )
    .addOption(
      new Option(
        '--print-sql',
        'print the SQL for a DBA to apply by hand, and touch nothing: what the database (--database-url) still needs, or with --from-version',
      ),
    )
    .addOption(
      new Option('--from-version <n>', 'with --print-sql: the version the target database is at (0: a new database)').argParser(
        parseIntIn(0, 1_000_000),
      ),
    )
    .addOption(new Option('--json', 'print the result as JSON'))
    .addOption(
      new Option(
        '--boss',
        "also install pg-boss (the relay's <schema>_relay_boss with its prune queue, with --inbox the inbox's --boss-schema, with --idempotency the janitor's) so least-privileged roles need no CREATE",
      ),
    )
    .addOption(
      new Option(
        '--boss-schema <name>',
        "the inbox's pg-boss schema (with --inbox or --for inbox; default <schema>_boss), or the idempotency janitor's (with --idempotency or --for idempotency; default <schema>_idempotency_boss)",
      )
        .env('FERRY_BOSS_SCHEMA')
        .argParser(parseSchema),
    )
    .addOption(
      new Option('--print-grants', 'print the GRANT statements a least-privileged role needs (with --role and --for), and touch nothing'),
    )
    .addOption(new Option('--role <role>', 'the role --print-grants grants to').argParser(parseRole))
    .addOption(
      new Option(
        '--for <part>',
        'the part the role runs (with --print-grants; reader: status, doctor, dlq list, replay, migrate --dry-run; console: ferry console --read-only)',
      ).choices(GRANT_TARGETS),
    )
    .addOption(
      new Option(
        '--consumer <name>',
        "with --for inbox: a consumer whose rows the role may read and write (repeat for each; none: every consumer's, with a warning)",
      ).argParser(collectConsumer),
    )
    .addHelpText(
      'after',
      "\nThe outbox keeps published rows for its retention (default 7d), stored in its settings\ntable: every relay's prune job uses it, whatever the relay's own flags.\n\nIndexes on the outbox are built with CREATE INDEX CONCURRENTLY, outside a transaction,\nso publishes go on during the build (inside one, every publish waited for it). The\n--print-sql script does the same, between its transactions, and says so: apply it with\npsql -v ON_ERROR_STOP=1 -f, which sends one statement at a time.\n\nExamples:\n  ferry migrate --database-url postgres://app@db/app\n  ferry migrate --retention 14d\n  ferry migrate --inbox --schema billing_ferry\n  ferry migrate --print-sql > ferry.sql            (what this database still needs)\n  ferry migrate --print-sql --from-version 0 > new.sql\n  ferry migrate --boss && ferry migrate --print-grants --role ferry_relay --for relay | psql\n  ferry migrate --print-grants --role billing_inbox --for inbox --consumer billing | psql\n  ferry migrate --print-grants --role ops_console --for console | psql",
    )
    .action(async (flags: MigrateFlags) => {
      const set: MigrationSet = flags.inbox ? 'inbox' : flags.idempotency ? 'idempotency' : 'outbox';
      if (flags.printGrants) {
        if (!flags.role || !flags.for)
          throw new ConfigError('--print-grants', `--print-grants needs --role ROLE and --for ${GRANT_TARGETS.join('|')}`);
        if (flags.consumer && flags.for !== 'inbox')
          throw new ConfigError('--consumer', `--consumer confines an inbox role: use it with --for inbox, not --for ${flags.for}`);
        if (flags.for === 'inbox' && !flags.consumer) {
          ctx.err(
            `warning: no --consumer: role "${flags.role}" may read and write every consumer's inbox rows; give --consumer NAME to confine it`,
          );
        }
        ctx.out(
          grantsSql({
            role: flags.role,
            for: flags.for,
            schema: flags.schema,
            ...(flags.bossSchema ? { bossSchema: flags.bossSchema } : {}),
            ...(flags.consumer ? { consumers: flags.consumer } : {}),
          }).trimEnd(),
        );
        return;
      }
      if (flags.printSql) {
        // The versions the target database already has: given, or read from it (printing from the
        // first migration failed on any migrated database with "relation … already exists").
        let fromVersion = flags.fromVersion;
        const hasDatabase = (flags.databaseUrl ?? ctx.env.FERRY_DATABASE_URL ?? ctx.env.DATABASE_URL) !== undefined;
        if (fromVersion === undefined && !hasDatabase) fromVersion = 0; // no database named: the SQL of a new one
        if (fromVersion === undefined) {
          const pool = new pg.Pool({ connectionString: resolveDatabaseUrl(flags.databaseUrl, ctx.env), max: 1 });
          try {
            fromVersion = (await migrationStatus(pool, { schema: flags.schema, set })).current;
          } catch (err) {
            throw new CommandFailedError(
              `cannot read the migration version of schema "${flags.schema}" (${(err as Error).message}): pass --from-version N (0 for a new database)`,
              { cause: err },
            );
          } finally {
            await pool.end();
          }
        }
        ctx.out(migrationSql({ schema: flags.schema, set, fromVersion, ...(flags.lanes ? { lanes: flags.lanes } : {}) }));
        return;
      }
      const url = resolveDatabaseUrl(flags.databaseUrl, ctx.env);
      const pool = new pg.Pool({ connectionString: url, max: 1 });
      try {
        if (flags.retention !== undefined && set !== 'outbox')
          throw new ConfigError('--retention', "--retention is the outbox's: leave out --inbox/--idempotency");
        if (flags.dryRun) {
          await dryRun(pool, flags, set, ctx);
          return;
        }
        const result = await migrate({ pool, schema: flags.schema, set, ...(flags.lanes ? { lanes: flags.lanes } : {}) });
        if (flags.retention !== undefined) await setRetention(pool, flags, flags.retention, ctx);
        if (flags.boss) {
          if (set === 'inbox') await installBoss(url, flags.bossSchema ?? bossSchemaFor(flags.schema), undefined);
          else {
            const [own, queue] =
              set === 'outbox'
                ? [relayBossSchemaFor(flags.schema), PRUNE_QUEUE]
                : [flags.bossSchema ?? idempotencyBossSchemaFor(flags.schema), idempotencyPruneQueue(flags.schema)];
            // The janitor creates its queue (a row) at start; the relay's is created here.
            await installBoss(url, own, set === 'outbox' ? queue : undefined);
            const old = bossSchemaFor(flags.schema);
            if (own !== old && (await forgetOldSchedule(pool, url, old, queue))) {
              ctx.err(`removed the ${queue} schedule from "${old}": it runs from "${own}" now`);
            }
          }
        }
        if (flags.json) ctx.out(JSON.stringify(result));
        else if (result.applied.length === 0)
          ctx.out(`${set} schema "${result.schema}" is current (version ${result.version}) on ${redactUrl(url)}`);
        else {
          ctx.out(
            `applied ${result.applied.map((m) => `${m.version} ${m.name}`).join(', ')} to ${set} schema "${result.schema}" on ${redactUrl(url)}`,
          );
        }
      } finally {
        await pool.end();
      }
    });
}
