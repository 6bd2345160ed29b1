import { ConfigError, notifyChannel, quoteIdentifier, ValidationError, validateEventId } from '@ferry/core';
import { Command, Option } from 'commander';
import pg from 'pg';
import { databaseUrlOption, parseIntIn, resolveDatabaseUrl, schemaOption } from '../config.js';
import { confirm } from '../confirm.js';
import type { CommandContext } from '../context.js';
import { count } from '../count.js';

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
  const selectors = [ids.length > 0, flags.key !== undefined, Boolean(flags.allDead)].filter(Boolean).length;
  if (selectors > 1) throw new ConfigError('--key', 'give event ids, --key or --all-dead, not several');
  if (selectors === 1 && ids.length === 0) {
    await settleBulk(action, flags, ctx);
    return;
  }
  const valid = validateIds(ids);
  // ---- retry/discard confirmation and --dry-run (issue 14): the dead rows among the ids are
  // shown (--dry-run) or confirmed (a terminal, or --yes) before anything changes.
  const done = await withPool(flags, ctx, async (pool, s) => {
    const selected = await pool.query<{ id: string }>(
      `SELECT id::text FROM ${s}.outbox WHERE id = ANY ($1::uuid[]) AND dead_at IS NOT NULL AND published_at IS NULL`,
      [valid],
    );
    if (flags.dryRun) return new Set(selected.rows.map((r) => r.id));
    if (selected.rows.length > 0 && !flags.yes && !(await confirm(`${action} ${selected.rows.length} dead event(s)`))) {
      throw new Error('nothing done: not confirmed');
    }
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
  const verb = flags.dryRun ? `would ${action}` : action === 'retry' ? 'retried' : 'discarded';
  if (flags.json) {
    ctx.out(
      JSON.stringify({
        [action === 'retry' ? 'retried' : 'discarded']: flags.dryRun ? [] : [...done],
        notDead: missing,
        dryRun: Boolean(flags.dryRun),
        ...(flags.dryRun ? { wouldChange: [...done] } : {}),
      }),
    );
  } else {
    for (const id of done) ctx.out(`${verb} ${id}`);
    for (const id of missing) ctx.err(`not dead (unknown, already published, or not failed): ${id}`);
  }
  if (missing.length > 0) throw new Error(`${missing.length} of ${valid.length} ids were not dead events`);
}

const SETTLE_SQL = {
  retry: `SET dead_at = NULL, attempts = 0, next_attempt_at = '-infinity'`,
  discard: `SET published_at = now(),
                  last_error = 'discarded by ferry dlq discard at ' || now()::text || coalesce(': ' || last_error, '')`,
} as const;

/** `--key K` or `--all-dead`: counts, confirms unless --yes, then settles every dead row selected. */
async function settleBulk(action: 'retry' | 'discard', flags: DlqFlags, ctx: CommandContext): Promise<void> {
  const where = `dead_at IS NOT NULL AND published_at IS NULL${flags.key !== undefined ? ' AND key = $1' : ''}`;
  const values = flags.key !== undefined ? [flags.key] : [];
  const what = flags.key !== undefined ? `of key ${JSON.stringify(flags.key)}` : 'of every key';
  const done = await withPool(flags, ctx, async (pool, s) => {
    const counted = await pool.query<{ n: string; keys: string }>(
      `SELECT count(*)::text AS n, count(DISTINCT key)::text AS keys FROM ${s}.outbox WHERE ${where}`,
      values,
    );
    const n = Number(counted.rows[0]?.n ?? 0);
    if (n === 0) return [];
    if (flags.dryRun) {
      const { rows } = await pool.query<{ id: string }>(`SELECT id::text FROM ${s}.outbox o WHERE ${where} ORDER BY o.seq`, values);
      return rows.map((r) => r.id);
    }
    if (!flags.yes && !(await confirm(`${action} ${count(n, 'dead event')} ${what} (${count(counted.rows[0]?.keys ?? 0, 'key')})`))) {
      throw new Error('nothing done: not confirmed');
    }
    const { rows } = await pool.query<{ id: string }>(`UPDATE ${s}.outbox ${SETTLE_SQL[action]} WHERE ${where} RETURNING id::text`, values);
    if (rows.length > 0) await pool.query('SELECT pg_notify($1, $2)', [notifyChannel(flags.schema), 'dlq']);
    return rows.map((r) => r.id);
  });
  const verb = flags.dryRun ? `would ${action}` : action === 'retry' ? 'retried' : 'discarded';
  if (flags.json) {
    const key = action === 'retry' ? 'retried' : 'discarded';
    ctx.out(
      JSON.stringify({
        [key]: flags.dryRun ? [] : done,
        notDead: [],
        dryRun: Boolean(flags.dryRun),
        ...(flags.dryRun ? { wouldChange: done } : {}),
      }),
    );
  } else if (done.length === 0) ctx.out(`no dead events ${what}`);
  else for (const id of done) ctx.out(`${verb} ${id}`);
}

interface ShownRow extends DeadRow {
  lane: number;
  source: string;
  content_type: string;
  data: Buffer;
  headers: Record<string, string> | null;
  occurred_at: Date;
  created_at: Date;
  next_attempt_at: Date | string;
  published_at: Date | null;
  blocked: string;
}

/** `ferry dlq show ID`: one dead event in full, its payload, and how many later events of its key wait behind it. */
async function show(id: string, flags: DlqFlags, ctx: CommandContext): Promise<void> {
  const [valid] = validateIds([id]);
  const row = await withPool(flags, ctx, async (pool, s) => {
    const { rows } = await pool.query<ShownRow>(
      `SELECT o.seq::text AS seq, o.id::text AS id, o.key, o.version::text AS version, o.lane, o.subject, o.type, o.source, o.content_type,
              o.data, o.headers, o.occurred_at, o.created_at, o.attempts, o.next_attempt_at, o.dead_at, o.published_at, o.last_error,
              (SELECT count(*) FROM ${s}.outbox b
                WHERE b.lane = o.lane AND b.key COLLATE "C" = o.key AND b.published_at IS NULL AND b.seq > o.seq)::text AS blocked
         FROM ${s}.outbox o WHERE o.id = $1::uuid`,
      [valid],
    );
    return rows[0];
  });
  if (!row) throw new Error(`no outbox event ${valid} (pruned after the retention, or never committed)`);
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
  };
  if (flags.json) {
    ctx.out(JSON.stringify(shown));
    return;
  }
  for (const [k, v] of Object.entries(shown)) {
    if (k === 'data' || k === 'dataEncoding' || k === 'headers') continue;
    ctx.out(`${k.padEnd(14)}${v ?? '-'}`);
  }
  ctx.out(`${'headers'.padEnd(14)}${JSON.stringify(shown.headers)}`);
  ctx.out(`data (${shown.dataEncoding}, ${row.data.byteLength} bytes):`);
  ctx.out(shown.data.length > 4000 ? `${shown.data.slice(0, 4000)}…` : shown.data);
}

export function dlqCommand(ctx: CommandContext): Command {
  const dlq = new Command('dlq').description('dead outbox events: list and show them, retry them, or discard them to unblock their keys');
  const common = (cmd: Command) =>
    cmd.addOption(databaseUrlOption()).addOption(schemaOption()).addOption(new Option('--json', 'print JSON'));
  dlq.addCommand(
    common(new Command('list').description('list dead events, oldest first, with how many later events of each key wait behind it'))
      .addOption(new Option('--limit <n>', 'at most this many').default(100).argParser(parseIntIn(1, 100_000)))
      .action(async (flags: DlqFlags) => {
        const rows = await withPool(flags, ctx, async (pool, s) => {
          const r = await pool.query<DeadRow>(
            `SELECT seq::text, id::text, key, version::text, subject, type, attempts, dead_at, last_error,
                    (SELECT count(*) FROM ${s}.outbox b
                      WHERE b.lane = o.lane AND b.key COLLATE "C" = o.key AND b.published_at IS NULL AND b.seq > o.seq)::int AS waiting
               FROM ${s}.outbox o WHERE dead_at IS NOT NULL AND published_at IS NULL ORDER BY o.seq LIMIT $1`,
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
