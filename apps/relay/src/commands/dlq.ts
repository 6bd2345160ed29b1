import { ConfigError, quoteIdentifier, ValidationError, validateEventId } from '@ferry/core';
import { Command, Option } from 'commander';
import type pg from 'pg';
import { cliOperator } from '../actions/audit.js';
import type { EventFilter, OutboxRowHead } from '../actions/event-filter.js';
import { type FailedAction, previewFailed, selectFailed, settleFailed } from '../actions/failed.js';
import { type RetryHazards, retryHazards } from '../actions/retry-hazards.js';
import { type ExpectedSelection, selectionOf } from '../actions/selection.js';
import { commandPool } from '../cli/database.js';
import { CLI_DEFAULTS } from '../cli/defaults.js';
import { parseIntIn, parseSelectionDigest } from '../cli/flag-parsers.js';
import { connectNats } from '../cli/nats-connection.js';
import { addDatabaseOptions, addNatsOptions, type NatsFlags } from '../cli/shared-options.js';
import { confirm } from '../confirm.js';
import type { CommandContext } from '../context.js';
import { count } from '../count.js';
import { CommandFailedError, NatsConnectError, NotConfirmedError } from '../errors.js';
import { listDeadSql } from '../sql/list-dead.js';
import { showEventSql } from '../sql/show-event.js';

interface DlqFlags extends Partial<NatsFlags> {
  databaseUrl?: string;
  schema: string;
  json?: boolean;
  limit?: number;
  key?: string;
  allDead?: boolean;
  allFailed?: boolean;
  yes?: boolean;
  dryRun?: boolean;
  /** list: the backing-off rows too. */
  failed?: boolean;
  /** retry --dry-run: ask NATS whether a stream binds each subject (default; --no-check-streams turns it off). */
  checkStreams?: boolean;
  /** The selection digest a --dry-run printed: change nothing unless the selection is still exactly that. */
  expectSelection?: string;
}

interface DeadRow extends OutboxRowHead {
  attempts: number;
  /** Null for a row the relay is backing off from (list --failed). */
  dead_at: Date | null;
  next_attempt_at: Date | string;
  last_error: string | null;
  /** Later events of the key waiting behind this one (list only). */
  waiting?: number;
}

function validateIds(ids: string[]): string[] {
  if (ids.length === 0) throw new ValidationError('ID', 'give event ids (see ferry dlq list), --key K, --all-dead or --all-failed');
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

/** What a retry of the selection would meet again (retry --dry-run): the console's preview runs the same check. */
async function checkRetry(pool: pg.Pool, filter: EventFilter, flags: DlqFlags): Promise<RetryHazards> {
  if (flags.checkStreams === false) return retryHazards(pool, flags.schema, filter);
  const nc = await connectNats(flags as NatsFlags, 'ferry-dlq').catch((err: Error) => {
    if (!(err instanceof NatsConnectError)) throw err; // bad flags stay usage errors
    throw new NatsConnectError(`${err.message}; or pass --no-check-streams to list without asking NATS`, { cause: err });
  });
  try {
    return await retryHazards(pool, flags.schema, filter, nc);
  } finally {
    await nc.close();
  }
}

/**
 * `retry` makes failed events due now, `discard` gives up on them (see
 * actions/failed.ts); either way their keys unblock and the relays are woken
 * by a NOTIFY. Failed: dead, or backing off between the relay's attempts.
 * Given ids, the ones that are not failed are reported (exit 1); given
 * `--key K` (every failed event of it), `--all-dead` or `--all-failed`,
 * every row selected is settled. The selection is shown (`--dry-run`) or
 * confirmed (a terminal, or `--yes`) before anything changes. `retry
 * --dry-run` also asks NATS whether a stream binds each subject (exit 1 when
 * some would fail again).
 */
async function settle(action: FailedAction, ids: string[], flags: DlqFlags, ctx: CommandContext): Promise<void> {
  const selectors = [ids.length > 0, flags.key !== undefined, Boolean(flags.allDead), Boolean(flags.allFailed)].filter(Boolean).length;
  if (selectors > 1) throw new ConfigError('--key', 'give event ids, --key, --all-dead or --all-failed, not several');
  const byIds = selectors === 0 || ids.length > 0;
  const valid = byIds ? validateIds(ids) : [];
  const filter: EventFilter = byIds
    ? { ids: valid }
    : flags.key !== undefined
      ? { key: flags.key }
      : flags.allDead
        ? { state: 'dead' }
        : {};
  const noun = flags.allDead ? 'dead event' : 'failed event';
  const what = flags.key !== undefined ? `of key ${JSON.stringify(flags.key)}` : 'of every key';
  const checking = action === 'retry' && Boolean(flags.dryRun);
  const { done, checks, selection } = await withPool(flags, ctx, async (pool) => {
    if (flags.dryRun) {
      const rows = await selectFailed(pool, flags.schema, filter);
      return {
        done: rows.map((r) => r.id),
        checks: checking && rows.length > 0 ? await checkRetry(pool, filter, flags) : undefined,
        selection: selectionOf(rows.map((r) => r.id)),
      };
    }
    const p = await previewFailed(pool, flags.schema, filter, 0, 0); // the question names no rows behind: none counted
    // What the operator confirms is this exact selection: the change refuses unless it is still the same rows.
    let expect: ExpectedSelection | undefined = flags.expectSelection !== undefined ? { digest: flags.expectSelection } : undefined;
    if (p.rows === 0 && !byIds && expect === undefined) return { done: [], checks: undefined };
    if (p.rows > 0 && !flags.yes) {
      const states = p.backingOff === 0 ? '' : p.dead === 0 ? ', backing off' : `: ${p.dead} dead, ${p.backingOff} backing off`;
      const question = `${action} ${count(p.selection.rows, noun)} ${byIds ? '' : `${what} `}(${count(p.keys, 'key')}${states}; selection ${p.selection.digest.slice(0, 12)})`;
      if (!(await confirm(question))) throw new NotConfirmedError();
      expect ??= p.selection;
    }
    // The change itself is the shared action (the console calls it too), recorded in operator_actions.
    const operator = { ...cliOperator(), ...(expect ? { expect } : {}) };
    return { done: await settleFailed(pool, flags.schema, action, filter, operator), checks: undefined };
  });
  const changed = new Set(done);
  const missing = valid.filter((id) => !changed.has(id.toLowerCase()));
  const subjects = checks?.subjects ?? [];
  const hazards = checks?.hazards ?? [];
  const verb = flags.dryRun ? `would ${action}` : action === 'retry' ? 'retried' : 'discarded';
  if (flags.json) {
    ctx.out(
      JSON.stringify({
        [action === 'retry' ? 'retried' : 'discarded']: flags.dryRun ? [] : done,
        notFailed: missing,
        /** @deprecated the same list as notFailed, kept for scripts written when only dead events could be settled. */
        notDead: missing,
        dryRun: Boolean(flags.dryRun),
        ...(flags.dryRun ? { wouldChange: done, selection } : {}),
        ...(checks
          ? { subjects: checks.subjects, hazards, ...(checks.maxPayload !== undefined ? { maxPayload: checks.maxPayload } : {}) }
          : {}),
      }),
    );
  } else if (!byIds && done.length === 0) ctx.out(`no ${noun}s ${what}`);
  else {
    for (const id of done) ctx.out(`${verb} ${id}`);
    if (selection && done.length > 0)
      ctx.out(
        `selection ${selection.digest} (${count(selection.rows, noun)}): confirm exactly these with --yes --expect-selection ${selection.digest}`,
      );
    for (const x of subjects)
      if (x.stream !== null) ctx.out(`subject ${x.subject} (${count(x.events, 'event')}): stream ${x.stream} binds it`);
    for (const h of hazards) ctx.err(`${h.message}: ${h.fix}`);
    for (const id of missing) ctx.err(`not failed (unknown, already published or discarded, or never failed): ${id}`);
  }
  if (missing.length > 0)
    throw new CommandFailedError(`${missing.length} of ${valid.length} ids were not failed events (dead or backing off)`);
  if (hazards.length > 0) {
    const unbound = hazards.filter((h) => h.kind === 'unbound-subject').flatMap((h) => h.subjects);
    const what = [
      ...(unbound.length > 0 ? [`no stream binds ${unbound.join(', ')}`] : []),
      ...(hazards.some((h) => h.kind === 'reserved-subject') ? ['subjects NATS reserves'] : []),
      ...(hazards.some((h) => h.kind === 'over-max-payload') ? ["over the server's max_payload"] : []),
    ];
    throw new CommandFailedError(
      `${count(checks?.wouldFailAgain ?? 0, 'event')} would fail again: ${what.join('; ')}; fix that first (above), then retry`,
    );
  }
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
    state: row.published_at
      ? row.dead_at
        ? 'discarded'
        : 'published'
      : row.dead_at
        ? 'dead'
        : row.attempts > 0
          ? 'backing-off'
          : 'pending',
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
  const dlq = new Command('dlq').description(
    'failed outbox events: list and show the dead ones, retry or discard dead and backing-off ones to unblock their keys',
  );
  const common = addDatabaseOptions;
  dlq.addCommand(
    common(new Command('list').description('list dead events, oldest first, with how many later events of each key wait behind it'))
      .addOption(new Option('--limit <n>', 'at most this many').default(CLI_DEFAULTS.dlqListLimit).argParser(parseIntIn(1, 100_000)))
      .addOption(new Option('--failed', 'the failed events the relay is backing off from too (not dead yet), with their next attempt'))
      .action(async (flags: DlqFlags) => {
        const rows = await withPool(flags, ctx, async (pool, schemaSql) => {
          const r = await pool.query<DeadRow>(listDeadSql(schemaSql, Boolean(flags.failed)), [flags.limit ?? CLI_DEFAULTS.dlqListLimit]);
          return r.rows;
        });
        const iso = (d: Date | string) => (d instanceof Date ? d.toISOString() : d);
        if (flags.json) {
          ctx.out(
            JSON.stringify(
              rows.map(({ next_attempt_at, ...r }) => ({
                ...r,
                dead_at: r.dead_at?.toISOString() ?? null,
                ...(flags.failed
                  ? { state: r.dead_at ? 'dead' : 'backing-off', next_attempt_at: r.dead_at ? null : iso(next_attempt_at) }
                  : {}),
              })),
            ),
          );
          return;
        }
        if (rows.length === 0) {
          ctx.out(flags.failed ? 'no failed events' : 'no dead events');
          return;
        }
        for (const r of rows) {
          const when = r.dead_at ? `dead_at=${r.dead_at.toISOString()}` : `backing off, next_attempt_at=${iso(r.next_attempt_at)}`;
          ctx.out(`${r.id}  key=${r.key} v${r.version} ${r.subject} ${r.type} attempts=${r.attempts} ${when} waiting=${r.waiting}`);
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
      .addOption(new Option('--key <key>', 'every failed event (dead or backing off) of this key'))
      .addOption(new Option('--all-dead', 'every dead event'))
      .addOption(new Option('--all-failed', 'every failed event: dead, or backing off between attempts'))
      .addOption(new Option('--yes', 'do not ask for confirmation'))
      .addOption(new Option('--dry-run', 'show the failed events it would change and their selection digest, and change nothing'))
      .addOption(
        new Option('--expect-selection <digest>', 'change nothing unless the selection is exactly the one a --dry-run printed').argParser(
          parseSelectionDigest,
        ),
      );
  const selection = `
Give event ids, or --key K, --all-dead or --all-failed. Failed events are dead ones and ones the
relay is backing off from between attempts: a head that will never go through (a subject no stream
binds) need not wait for its last attempt. It asks for confirmation on a terminal; elsewhere pass
--yes (without it nothing changes, exit 2). --dry-run lists what it would change and the selection's
digest; --expect-selection DIGEST (with --yes) then changes exactly those events or nothing (exit 1
when the selection changed). A confirmation on a terminal is held to the selection it asked about
the same way. Exit 1 naming the ids that are not failed (unknown, published, discarded, or never failed).`;
  dlq.addCommand(
    addNatsOptions(bulk(new Command('retry').description('make failed events (dead or backing off) due now: their keys unblock')))
      .addOption(
        new Option(
          '--no-check-streams',
          'with --dry-run, do not ask NATS whether a stream binds each subject or compare sizes with its max_payload',
        ),
      )
      .argument('[ID...]', 'event ids')
      .addHelpText(
        'after',
        `${selection}
With --dry-run it also checks what the retried events would run into again, with the fix for each
(exit 1 when any would fail again): a subject no stream binds now and an event that encodes to more
than the server's max_payload (both asked of NATS, --nats-url …), and a subject NATS reserves. The
console's retry preview runs the same check (actions/retry-hazards.ts).`,
      )
      .action((ids: string[], flags: DlqFlags) => settle('retry', ids, flags, ctx)),
  );
  dlq.addCommand(
    bulk(new Command('discard').description('give up on failed events (dead or backing off): keep them for audit, unblock their keys'))
      .argument('[ID...]', 'event ids')
      .addHelpText(
        'after',
        `${selection}
A backing-off event may be on the wire as it is discarded: it is never sent again, but that one
send may still reach the stream (before any later event of its key).`,
      )
      .action((ids: string[], flags: DlqFlags) => settle('discard', ids, flags, ctx)),
  );
  for (const cmd of dlq.commands) {
    cmd.exitOverride().configureOutput({ writeOut: (t) => ctx.out(t.trimEnd()), writeErr: (t) => ctx.err(t.trimEnd()) });
  }
  return dlq;
}
