import {
  ConfigError,
  GRANT_TARGETS,
  type GrantTarget,
  grantsSql,
  type MigrationSet,
  migrate,
  migrationSql,
  validateIdentifier,
} from '@ferry/core';
import { Command, InvalidArgumentError, Option } from 'commander';
import pg from 'pg';
import { PgBoss } from 'pg-boss';
import { databaseUrlOption, parseLanes, parseSchema, redactUrl, resolveDatabaseUrl, schemaOption } from '../config.js';
import type { CommandContext } from '../context.js';
import { bossSchema, PRUNE_QUEUE } from '../janitor.js';

function parseRole(value: string): string {
  try {
    return validateIdentifier(value, 'role');
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
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
  await boss.start();
  try {
    if (queue) await boss.createQueue(queue, { retryLimit: 2, expireInSeconds: 15 * 60 });
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
  boss?: boolean;
  bossSchema?: string;
}

export function migrateCommand(ctx: CommandContext): Command {
  return new Command('migrate')
    .description('create or upgrade the Ferry tables (idempotent; concurrent runs are safe)')
    .addOption(databaseUrlOption())
    .addOption(schemaOption())
    .addOption(new Option('--inbox', 'migrate the consumer side (inbox_versions, inbox_messages) instead of the outbox'))
    .addOption(new Option('--idempotency', 'migrate the request-edge idempotency keys table instead of the outbox'))
    .addOption(new Option('--lanes <n>', 'outbox lanes, fixed by the first migrate (1-1024, default 16)').argParser(parseLanes))
    .addOption(new Option('--print-sql', 'print the SQL for a DBA to apply by hand, and touch nothing'))
    .addOption(new Option('--json', 'print the result as JSON'))
    .addOption(
      new Option(
        '--boss',
        "also install pg-boss (the relay's <schema>_boss with its prune queue, or with --inbox the inbox's --boss-schema) so least-privileged roles need no CREATE",
      ),
    )
    .addOption(
      new Option('--boss-schema <name>', "the inbox's pg-boss schema (with --inbox; default <schema>_boss)")
        .env('FERRY_BOSS_SCHEMA')
        .argParser(parseSchema),
    )
    .addOption(
      new Option('--print-grants', 'print the GRANT statements a least-privileged role needs (with --role and --for), and touch nothing'),
    )
    .addOption(new Option('--role <role>', 'the role --print-grants grants to').argParser(parseRole))
    .addOption(new Option('--for <part>', 'the part the role runs (with --print-grants)').choices(GRANT_TARGETS))
    .addHelpText(
      'after',
      '\nExamples:\n  ferry migrate --database-url postgres://app@db/app\n  ferry migrate --inbox --schema billing_ferry\n  ferry migrate --print-sql > ferry.sql\n  ferry migrate --boss && ferry migrate --print-grants --role ferry_relay --for relay | psql',
    )
    .action(async (flags: MigrateFlags) => {
      const set: MigrationSet = flags.inbox ? 'inbox' : flags.idempotency ? 'idempotency' : 'outbox';
      if (flags.printGrants) {
        if (!flags.role || !flags.for)
          throw new ConfigError('--print-grants', '--print-grants needs --role ROLE and --for publisher|relay|inbox');
        const boss = flags.for === 'inbox' ? (flags.bossSchema ?? bossSchema(flags.schema)) : bossSchema(flags.schema);
        ctx.out(grantsSql({ role: flags.role, for: flags.for, schema: flags.schema, bossSchema: boss }).trimEnd());
        return;
      }
      if (flags.printSql) {
        ctx.out(migrationSql({ schema: flags.schema, set, ...(flags.lanes ? { lanes: flags.lanes } : {}) }));
        return;
      }
      const url = resolveDatabaseUrl(flags.databaseUrl, ctx.env);
      const pool = new pg.Pool({ connectionString: url, max: 1 });
      try {
        const result = await migrate({ pool, schema: flags.schema, set, ...(flags.lanes ? { lanes: flags.lanes } : {}) });
        if (flags.boss && set !== 'idempotency') {
          if (set === 'inbox') await installBoss(url, flags.bossSchema ?? bossSchema(flags.schema), undefined);
          else await installBoss(url, bossSchema(flags.schema), PRUNE_QUEUE);
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
