import { ConfigError, quoteIdentifier, ValidationError, validateEventId } from '@ferry/core';
import { Command, Option } from 'commander';
import type pg from 'pg';
import { cliOperator } from '../actions/audit.js';
import { settleDead } from '../actions/dead.js';
import { commandPool } from '../cli/database.js';
import { CLI_DEFAULTS } from '../cli/defaults.js';
import { parseIntIn } from '../cli/flag-parsers.js';
import { addDatabaseOptions } from '../cli/shared-options.js';
import { confirm } from '../confirm.js';
import type { CommandContext } from '../context.js';
import { count } from '../count.js';
import { CommandFailedError, NotConfirmedError } from '../errors.js';
import { countDeadSql } from '../sql/count-dead.js';
import type { DeadSelector } from '../sql/dead-events.js';
import { listDeadSql } from '../sql/list-dead.js';
import { selectDeadIdsSql } from '../sql/select-dead.js';
import { showEventSql } from '../sql/show-event.js';

interface DlqFlags {
  databaseUrl?: string;
  schema: string;
  json?: boolean;
  limit?: number;
  key?: string;
  allDead?: boolean;
  yes?: boolean;
  dryRun?: boolean;
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
  /** Later events of the key waiting behind this one (list only). */
  waiting?: number;
}

function validateIds(ids: string[]): string[] {
  if (ids.length === 0) throw new ValidationError('ID', 'give event ids (see ferry dlq list), --key K or --all-dead');
  return ids.map((id, i) => validateEventId(id, `ID ${i + 1}`));
}

async function withPool<T>(flags: DlqFlags, ctx: CommandContext, fn: (pool: pg.Pool, schemaSql: string) => Promise<T>): Promise<T> {
  const pool = commandPool(flags, ctx, 'ferry-dlq');
  try {
    return await fn(pool, quoteIdentifier(flags.schema));
  } finally {
    await pool.end();
  }
}

/**
 * `retry` makes dead events due again, `discard` gives up on them (see
 * sql/settle-dead.ts); either way their keys unblock and the relays are woken
 * by a NOTIFY. Given ids, the ones that are not dead are reported (exit 1);
 * given `--key K` or `--all-dead`, every dead row selected is settled. The
 * selection is shown (`--dry-run`) or confirmed (a terminal, or `--yes`)
 * before anything changes.
 */
async function settle(action: 'retry' | 'discard', ids: string[], flags: DlqFlags, ctx: CommandContext): Promise<void> {
  const selectors = [ids.length > 0, flags.key !== undefined, Boolean(flags.allDead)].filter(Boolean).length;
  if (selectors > 1) throw new ConfigError('--key', 'give event ids, --key or --all-dead, not several');
  const selector: DeadSelector = selectors === 1 && ids.length === 0 ? (flags.key !== undefined ? 'key' : 'all') : 'ids';
  const valid = selector === 'ids' ? validateIds(ids) : [];
  const values = selector === 'ids' ? [valid] : selector === 'key' ? [flags.key] : [];
  const what = selector === 'key' ? `of key ${JSON.stringify(flags.key)}` : 'of every key';
  const done = await withPool(flags, ctx, async (pool, schemaSql) => {
    let question: string | undefined;
    if (selector === 'ids') {
      const selected = await pool.query<{ id: string }>(selectDeadIdsSql(schemaSql, selector), values);
      if (flags.dryRun) return selected.rows.map((r) => r.id);
      if (selected.rows.length > 0) question = `${action} ${selected.rows.length} dead event(s)`;
    } else {
      const counted = await pool.query<{ n: string; keys: string }>(countDeadSql(schemaSql, selector), values);
      const n = Number(counted.rows[0]?.n ?? 0);
      if (n === 0) return [];
      if (flags.dryRun) return (await pool.query<{ id: string }>(selectDeadIdsSql(schemaSql, selector), values)).rows.map((r) => r.id);
      question = `${action} ${count(n, 'dead event')} ${what} (${count(counted.rows[0]?.keys ?? 0, 'key')})`;
    }
    if (question !== undefined && !flags.yes && !(await confirm(question))) throw new NotConfirmedError();
    // The change itself is the shared action (the console calls it too), recorded in operator_actions.
    const filter = selector === 'ids' ? { ids: valid } : selector === 'key' ? { key: flags.key as string } : {};
    return settleDead(pool, flags.schema, action, filter, cliOperator());
  });
  const changed = new Set(done);
  const missing = valid.filter((id) => !changed.has(id.toLowerCase()));
  const verb = flags.dryRun ? `would ${action}` : action === 'retry' ? 'retried' : 'discarded';
  if (flags.json) {
    ctx.out(
      JSON.stringify({
        [action === 'retry' ? 'retried' : 'discarded']: flags.dryRun ? [] : done,
        notDead: missing,
        dryRun: Boolean(flags.dryRun),
        ...(flags.dryRun ? { wouldChange: done } : {}),
      }),
    );
  } else if (selector !== 'ids' && done.length === 0) ctx.out(`no dead events ${what}`);
  else {
    for (const id of done) ctx.out(`${verb} ${id}`);
    for (const id of missing) ctx.err(`not dead (unknown, already published, or not failed): ${id}`);
  }
  if (missing.length > 0) throw new CommandFailedError(`${missing.length} of ${valid.length} ids were not dead events`);
}

interface ShownRow extends DeadRow {
  lane: number;
  source: string;
  content_type: string;
  /** The first SHOW_DATA_BYTES bytes of the data. */
  data: Buffer;
  data_bytes: number;
  headers: Record<string, string> | null;
  occurred_at: Date;
  created_at: Date;
  next_attempt_at: Date | string;
  published_at: Date | null;
  blocked: string;
}

/** The data bytes `ferry dlq show` reads at most: its `--json` carries them, and a stored row may be far larger. */
const SHOW_DATA_BYTES = 1024 * 1024;

/** `ferry dlq show ID`: one dead event in full, its payload, and how many later events of its key wait behind it. */
async function show(id: string, flags: DlqFlags, ctx: CommandContext): Promise<void> {
  const [valid] = validateIds([id]);
  const row = await withPool(flags, ctx, async (pool, schemaSql) => {
    const { rows } = await pool.query<ShownRow>(showEventSql(schemaSql), [valid, SHOW_DATA_BYTES]);
    return rows[0];
  });
  if (!row) throw new CommandFailedError(`no outbox event ${valid} (pruned after the retention, or never committed)`);
  const text = /json|^text\//i.test(row.content_type);
  const shown = {
    seq: row.seq,
    id: row.id,
    key: row.key,
    version: row.version,
    lane: row.lane,
    subject: row.subject,
    type: row.type,
    source: row.source,
    contentType: row.content_type,
    state: row.published_at ? (row.dead_at ? 'discarded' : 'published') : row.dead_at ? 'dead' : 'pending',
    attempts: row.attempts,
    lastError: row.last_error,
    occurredAt: row.occurred_at.toISOString(),
    createdAt: row.created_at.toISOString(),
    deadAt: row.dead_at?.toISOString() ?? null,
    publishedAt: row.published_at?.toISOString() ?? null,
    blockedBehind: Number(row.blocked),
    headers: row.headers ?? {},
    data: text ? row.data.toString('utf8') : row.data.toString('base64'),
    dataEncoding: text ? 'utf8' : 'base64',
    dataBytes: row.data_bytes,
    dataTruncated: row.data_bytes > row.data.byteLength,
  };
  if (flags.json) {
    ctx.out(JSON.stringify(shown));
    return;
  }
  for (const [k, v] of Object.entries(shown)) {
    if (k === 'data' || k === 'dataEncoding' || k === 'dataBytes' || k === 'dataTruncated' || k === 'headers') continue;
    ctx.out(`${k.padEnd(14)}${v ?? '-'}`);
  }
  ctx.out(`${'headers'.padEnd(14)}${JSON.stringify(shown.headers)}`);
  ctx.out(`data (${shown.dataEncoding}, ${row.data_bytes} bytes):`);
  ctx.out(shown.data.length > 4000 || shown.dataTruncated ? `${shown.data.slice(0, 4000)}…` : shown.data);
}

export function dlqCommand(ctx: CommandContext): Command {
  const dlq = new Command('dlq').description('dead outbox events: list and show them, retry them, or discard them to unblock their keys');
  const common = addDatabaseOptions;
  dlq.addCommand(
    common(new Command('list').description('list dead events, oldest first, with how many later events of each key wait behind it'))
      .addOption(new Option('--limit <n>', 'at most this many').default(CLI_DEFAULTS.dlqListLimit).argParser(parseIntIn(1, 100_000)))
      .action(async (flags: DlqFlags) => {
        const rows = await withPool(flags, ctx, async (pool, schemaSql) => {
          const r = await pool.query<DeadRow>(listDeadSql(schemaSql), [flags.limit ?? CLI_DEFAULTS.dlqListLimit]);
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
          ctx.out(
            `${r.id}  key=${r.key} v${r.version} ${r.subject} ${r.type} attempts=${r.attempts} dead_at=${r.dead_at.toISOString()} waiting=${r.waiting}`,
          );
          ctx.out(`    ${r.last_error ?? ''}`);
        }
      }),
  );
  dlq.addCommand(
    common(new Command('show').description('one event in full: state, last error, headers, payload, later events of its key waiting'))
      .argument('<ID>', 'event id')
      .action((id: string, flags: DlqFlags) => show(id, flags, ctx)),
  );
  const bulk = (cmd: Command) =>
    common(cmd)
      .addOption(new Option('--key <key>', 'every dead event of this key'))
      .addOption(new Option('--all-dead', 'every dead event'))
      .addOption(new Option('--yes', 'do not ask for confirmation'))
      .addOption(new Option('--dry-run', 'show the dead events it would change, and change nothing'))
      .addHelpText(
        'after',
        '\nGive event ids, or --key K, or --all-dead. It asks for confirmation on a terminal; elsewhere\npass --yes (without it nothing changes, exit 2). --dry-run lists what it would change.',
      );
  dlq.addCommand(
    bulk(new Command('retry').description('make dead events due again (their keys unblock)'))
      .argument('[ID...]', 'event ids')
      .action((ids: string[], flags: DlqFlags) => settle('retry', ids, flags, ctx)),
  );
  dlq.addCommand(
    bulk(new Command('discard').description('give up on dead events: keep them for audit, unblock their keys'))
      .argument('[ID...]', 'event ids')
      .action((ids: string[], flags: DlqFlags) => settle('discard', ids, flags, ctx)),
  );
  for (const cmd of dlq.commands) {
    cmd.exitOverride().configureOutput({ writeOut: (t) => ctx.out(t.trimEnd()), writeErr: (t) => ctx.err(t.trimEnd()) });
  }
  return dlq;
}
