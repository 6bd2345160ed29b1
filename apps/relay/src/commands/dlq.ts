import { notifyChannel, quoteIdentifier, ValidationError, validateEventId } from '@ferry/core';
import { Command, Option } from 'commander';
import pg from 'pg';
import { databaseUrlOption, parseIntIn, resolveDatabaseUrl, schemaOption } from '../config.js';
import type { CommandContext } from '../context.js';

interface DlqFlags {
  databaseUrl?: string;
  schema: string;
  json?: boolean;
  limit?: number;
}

interface DeadRow {
  seq: string;
  id: string;
  key: string;
  version: string;
  subject: string;
  type: string;
  attempts: number;
  dead_at: Date;
  last_error: string | null;
}

function validateIds(ids: string[]): string[] {
  if (ids.length === 0) throw new ValidationError('ID', 'give at least one event id (see ferry dlq list)');
  return ids.map((id, i) => validateEventId(id, `ID ${i + 1}`));
}

async function withPool<T>(flags: DlqFlags, ctx: CommandContext, fn: (pool: pg.Pool, s: string) => Promise<T>): Promise<T> {
  const pool = new pg.Pool({ connectionString: resolveDatabaseUrl(flags.databaseUrl, ctx.env), max: 1, application_name: 'ferry-dlq' });
  try {
    return await fn(pool, quoteIdentifier(flags.schema));
  } finally {
    await pool.end();
  }
}

/**
 * `retry`: clears dead_at, attempts and next_attempt_at, so the row is due at
 * once and its key unblocks; the relays are woken by a NOTIFY.
 * `discard`: the row stays for audit but is marked published (published_at =
 * now(), dead_at kept, last_error prefixed with "discarded"), so it no longer
 * blocks its key; it is pruned with the published rows after the retention.
 */
async function settle(action: 'retry' | 'discard', ids: string[], flags: DlqFlags, ctx: CommandContext): Promise<void> {
  const valid = validateIds(ids);
  const done = await withPool(flags, ctx, async (pool, s) => {
    const sql =
      action === 'retry'
        ? `UPDATE ${s}.outbox SET dead_at = NULL, attempts = 0, next_attempt_at = '-infinity'
            WHERE id = ANY ($1::uuid[]) AND dead_at IS NOT NULL AND published_at IS NULL RETURNING id::text`
        : `UPDATE ${s}.outbox SET published_at = now(),
                  last_error = 'discarded by ferry dlq discard at ' || now()::text || coalesce(': ' || last_error, '')
            WHERE id = ANY ($1::uuid[]) AND dead_at IS NOT NULL AND published_at IS NULL RETURNING id::text`;
    const { rows } = await pool.query<{ id: string }>(sql, [valid]);
    if (rows.length > 0) await pool.query('SELECT pg_notify($1, $2)', [notifyChannel(flags.schema), 'dlq']);
    return new Set(rows.map((r) => r.id));
  });
  const missing = valid.filter((id) => !done.has(id.toLowerCase()));
  if (flags.json) ctx.out(JSON.stringify({ [action === 'retry' ? 'retried' : 'discarded']: [...done], notDead: missing }));
  else {
    for (const id of done) ctx.out(`${action === 'retry' ? 'retried' : 'discarded'} ${id}`);
    for (const id of missing) ctx.err(`not dead (unknown, already published, or not failed): ${id}`);
  }
  if (missing.length > 0) throw new Error(`${missing.length} of ${valid.length} ids were not dead events`);
}

export function dlqCommand(ctx: CommandContext): Command {
  const dlq = new Command('dlq').description('dead outbox events: list them, retry them, or discard them to unblock their keys');
  const common = (cmd: Command) =>
    cmd.addOption(databaseUrlOption()).addOption(schemaOption()).addOption(new Option('--json', 'print JSON'));
  dlq.addCommand(
    common(new Command('list').description('list dead events, oldest first'))
      .addOption(new Option('--limit <n>', 'at most this many').default(100).argParser(parseIntIn(1, 100_000)))
      .action(async (flags: DlqFlags) => {
        const rows = await withPool(flags, ctx, async (pool, s) => {
          const r = await pool.query<DeadRow>(
            `SELECT seq::text, id::text, key, version::text, subject, type, attempts, dead_at, last_error
               FROM ${s}.outbox WHERE dead_at IS NOT NULL AND published_at IS NULL ORDER BY seq LIMIT $1`,
            [flags.limit ?? 100],
          );
          return r.rows;
        });
        if (flags.json) {
          ctx.out(JSON.stringify(rows.map((r) => ({ ...r, dead_at: r.dead_at.toISOString() }))));
          return;
        }
        if (rows.length === 0) {
          ctx.out('no dead events');
          return;
        }
        for (const r of rows) {
          ctx.out(`${r.id}  key=${r.key} v${r.version} ${r.subject} ${r.type} attempts=${r.attempts} dead_at=${r.dead_at.toISOString()}`);
          ctx.out(`    ${r.last_error ?? ''}`);
        }
      }),
  );
  dlq.addCommand(
    common(new Command('retry').description('make dead events due again (their keys unblock)'))
      .argument('<ID...>', 'event ids')
      .action((ids: string[], flags: DlqFlags) => settle('retry', ids, flags, ctx)),
  );
  dlq.addCommand(
    common(new Command('discard').description('give up on dead events: keep them for audit, unblock their keys'))
      .argument('<ID...>', 'event ids')
      .action((ids: string[], flags: DlqFlags) => settle('discard', ids, flags, ctx)),
  );
  for (const cmd of dlq.commands) {
    cmd.exitOverride().configureOutput({ writeOut: (t) => ctx.out(t.trimEnd()), writeErr: (t) => ctx.err(t.trimEnd()) });
  }
  return dlq;
}
