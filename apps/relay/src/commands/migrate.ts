import { type MigrationSet, migrate, migrationSql } from '@ferry/core';
import { Command, Option } from 'commander';
import pg from 'pg';
import { databaseUrlOption, parseLanes, redactUrl, resolveDatabaseUrl, schemaOption } from '../config.js';
import type { CommandContext } from '../context.js';

interface MigrateFlags {
  databaseUrl?: string;
  schema: string;
  inbox?: boolean;
  idempotency?: boolean;
  lanes?: number;
  printSql?: boolean;
  json?: boolean;
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
    .addHelpText(
      'after',
      '\nExamples:\n  ferry migrate --database-url postgres://app@db/app\n  ferry migrate --inbox --schema billing_ferry\n  ferry migrate --print-sql > ferry.sql',
    )
    .action(async (flags: MigrateFlags) => {
      const set: MigrationSet = flags.inbox ? 'inbox' : flags.idempotency ? 'idempotency' : 'outbox';
      if (flags.printSql) {
        ctx.out(migrationSql({ schema: flags.schema, set, ...(flags.lanes ? { lanes: flags.lanes } : {}) }));
        return;
      }
      const url = resolveDatabaseUrl(flags.databaseUrl, ctx.env);
      const pool = new pg.Pool({ connectionString: url, max: 1 });
      try {
        const result = await migrate({ pool, schema: flags.schema, set, ...(flags.lanes ? { lanes: flags.lanes } : {}) });
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
