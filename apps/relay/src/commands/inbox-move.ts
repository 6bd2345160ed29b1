import { bossSchemaFor, ConfigError, quoteIdentifier, ValidationError } from '@ferry/core';
import { type MovedParked, moveCommand, moveParked, type ParkedEvent, parkQueueName } from '@ferry/inbox';
import { type Command, Option } from 'commander';
import type pg from 'pg';
import type { PgBoss } from 'pg-boss';
import { cliOperator } from '../actions/audit.js';
import { moveParkedAction } from '../actions/parked.js';
import { type ExpectedSelection, selectionOfSet } from '../actions/selection.js';
import { commandPool } from '../cli/database.js';
import { parseSchema } from '../cli/flag-parsers.js';
import { confirm } from '../confirm.js';
import type { CommandContext } from '../context.js';
import { CommandFailedError, NotConfirmedError } from '../errors.js';

// `ferry inbox parked move`, and the refusal of a retry in a pg-boss schema no inbox works
// (issue 43, item 2). Beside commands/inbox.ts, which composes it, so that file stays one screen
// of list/retry/discard.

/** The flags of `parked move` (and what the retry refusal reads of `parked retry`'s). */
export interface MoveFlags {
  databaseUrl?: string;
  schema: string;
  bossSchema?: string;
  consumer?: string;
  json?: boolean;
  yes?: boolean;
  dryRun?: boolean;
  expectSelection?: string;
  fromBossSchema?: string;
}

/** What the command borrows from commands/inbox.ts: its pg-boss lifetime and its line format. */
export interface ParkedCommandParts {
  withBoss<T>(flags: MoveFlags, ctx: CommandContext, fn: (boss: PgBoss, pool: pg.Pool) => Promise<T>): Promise<T>;
  describeParked(p: ParkedEvent): string[];
}

/**
 * `parked retry --boss-schema X`, where X is not the default `<schema>_boss` and the consumer's
 * queue is in `<schema>_boss`: its inboxes work that one, so a retry in X would answer "retried"
 * and then wait for a worker that never comes. Refused (exit 2), naming the move that fixes it.
 */
export async function refuseUnworkedRetry(flags: MoveFlags, ctx: CommandContext): Promise<void> {
  const given = flags.bossSchema;
  const current = bossSchemaFor(flags.schema);
  if (given === undefined || given === current || flags.consumer === undefined) return;
  const pool = commandPool(flags, ctx, 'ferry-inbox');
  try {
    const queues = `${quoteIdentifier(current)}.queue`;
    const { rows } = await pool.query<{ t: string | null }>('SELECT to_regclass($1)::text AS t', [queues]);
    if (!rows[0]?.t) return;
    const { rows: q } = await pool.query(`SELECT 1 FROM ${queues} WHERE name = $1`, [parkQueueName(flags.consumer)]);
    if (q.length === 0) return;
  } finally {
    await pool.end();
  }
  throw new ConfigError(
    '--boss-schema',
    `consumer ${flags.consumer}'s inbox works its parked events in pg-boss schema "${current}" (its queue is there), not in "${given}": a retry in "${given}" would wait for a worker that never comes. Move them where they are worked (a failed one is retried there at once): ${moveCommand(flags.schema, current, given, flags.consumer)}`,
  );
}

function describeMoved(r: MovedParked, flags: MoveFlags, verb: string, ctx: CommandContext, parts: ParkedCommandParts): void {
  const from = flags.fromBossSchema;
  for (const p of r.moved) for (const line of parts.describeParked(p)) ctx.out(`${verb} ${line}`);
  for (const p of r.busy)
    ctx.err(`ferry: left (an inbox on pg-boss schema "${from}" is retrying its key now; move again): ${parts.describeParked(p)[0]}`);
  for (const p of r.malformed)
    ctx.err(
      `ferry: left (not a Ferry parked event; discard it there with ferry inbox parked discard --boss-schema ${from} --consumer ${flags.consumer} ${p.jobId}): ${parts.describeParked(p)[0]}`,
    );
}

/** Preview (or --dry-run), confirm, move, record. */
async function moveAction(flags: MoveFlags, ctx: CommandContext, parts: ParkedCommandParts): Promise<void> {
  if (flags.consumer === undefined)
    throw new ValidationError('consumer', 'name the consumer whose parked events to move (--consumer NAME)');
  const from = flags.fromBossSchema as string;
  const bossSchema = flags.bossSchema ?? bossSchemaFor(flags.schema);
  const consumer = flags.consumer;
  const r = await parts.withBoss(flags, ctx, async (boss, pool) => {
    const base = { pool, schema: flags.schema, boss, bossSchema, fromBossSchema: from, consumer };
    let expect: ExpectedSelection | undefined = flags.expectSelection !== undefined ? { digest: flags.expectSelection } : undefined;
    if (flags.dryRun || !flags.yes) {
      const preview = await moveParked({ ...base, dryRun: true });
      const selection = selectionOfSet(preview.moved.map((p) => p.jobId));
      if (flags.dryRun) {
        if (flags.json) {
          ctx.out(JSON.stringify({ dryRun: true, wouldMove: preview.moved, busy: preview.busy, malformed: preview.malformed, selection }));
        } else {
          describeMoved(preview, flags, 'would move', ctx, parts);
          ctx.out(
            `selection ${selection.digest} (${preview.moved.length} parked event(s) in pg-boss schema "${from}"): move exactly these with --yes --expect-selection ${selection.digest}`,
          );
        }
        return undefined;
      }
      const question = `move ${preview.moved.length} parked event(s) of consumer ${consumer} from pg-boss schema "${from}" into "${bossSchema}" (selection ${selection.digest.slice(0, 12)})`;
      if (!(await confirm(question))) throw new NotConfirmedError();
      expect ??= selection;
    }
    return moveParkedAction({ ...base, ...(expect ? { expect } : {}), ...cliOperator() });
  });
  if (r === undefined) return; // --dry-run
  if (r.notRecorded) ctx.err(`ferry: warning: not recorded in the audit trail: ${r.notRecorded}`);
  if (flags.json) ctx.out(JSON.stringify({ moved: r.moved.length, busy: r.busy.length, malformed: r.malformed.length, jobs: r.moved }));
  else {
    describeMoved(r, flags, 'moved', ctx, parts);
    ctx.out(`moved ${r.moved.length} parked event(s) of consumer ${consumer} from pg-boss schema "${from}" into "${bossSchema}"`);
  }
  if (r.busy.length > 0 || r.malformed.length > 0) {
    throw new CommandFailedError(`${r.busy.length + r.malformed.length} parked job(s) left in pg-boss schema "${from}" (see above)`);
  }
}

/** `ferry inbox parked move`, on a command that already has the parked commands' common and confirming options. */
export function parkedMoveCommand(cmd: Command, ctx: CommandContext, parts: ParkedCommandParts): Command {
  return cmd
    .description(
      "move a consumer's parked events from an old pg-boss schema (earlier releases parked in pgboss) into the one its inbox works (--boss-schema), key by key, in order, once",
    )
    .addOption(
      new Option('--from-boss-schema <name>', 'the old pg-boss schema the parked events are in (earlier releases: pgboss)')
        .argParser(parseSchema)
        .makeOptionMandatory(),
    )
    .addHelpText(
      'after',
      `
Each key moves in one transaction, under the key's row lock (the one the inbox takes to park or
apply): its jobs are sent to the consumer's queue in --boss-schema with the same job ids, due now
with fresh attempts, and deleted from --from-boss-schema; in sequential mode the key's parked
events are then sorted into version order with those already there. So an inbox may keep running,
and a second move finds nothing to move. A key an inbox on the old schema is retrying right now,
and a job that is not a Ferry parked event, are left (exit 1: move again, or discard the job
there). The move is recorded in the audit trail (action parked.move).`,
    )
    .action((flags: MoveFlags) => moveAction(flags, ctx, parts));
}
