import { bossSchemaFor, ConfigError, isConfigError, isUuid, OLD_BOSS_SCHEMA, pgBossDb, startPgBoss, ValidationError } from '@ferry/core';
import { findParkedElsewhere, listParked, type ParkedElsewhere, type ParkedEvent } from '@ferry/inbox';
import { Command, Option } from 'commander';
import type pg from 'pg';
import { PgBoss } from 'pg-boss';
import { cliOperator } from '../actions/audit.js';
import { type ParkedAction, parkedEligible, type SettledParked, settleParked } from '../actions/parked.js';
import { type ExpectedSelection, selectionOfSet } from '../actions/selection.js';
import { commandPool } from '../cli/database.js';
import { CLI_DEFAULTS } from '../cli/defaults.js';
import { parseIntIn, parseSchema, parseSelectionDigest } from '../cli/flag-parsers.js';
import { databaseUrlOption, inboxBossSchemaOption, schemaOption } from '../cli/shared-options.js';
import { confirm } from '../confirm.js';
import type { CommandContext } from '../context.js';
import { CommandFailedError, NotConfirmedError } from '../errors.js';
import { parkedMoveCommand, refuseUnworkedRetry } from './inbox-move.js';
import { adviseAfterDiscard, inboxSkipCommand, outboxSchemaOption, parkedJobKeys, reportStuckKeys } from './inbox-skip.js';

interface ParkedFlags {
  databaseUrl?: string;
  schema: string;
  /** Default `<schema>_boss`, the inbox's own default. */
  bossSchema?: string;
  /** list: where earlier releases parked (default pgboss), looked at for events out of view. */
  oldBossSchema?: string;
  consumer?: string;
  json?: boolean;
  limit?: number;
  yes?: boolean;
  dryRun?: boolean;
  /** The selection digest a --dry-run printed: change nothing unless the selection is still exactly that. */
  expectSelection?: string;
  /** list: the outbox in this database, looked up for a replay of a stuck key's missing version. */
  outboxSchema?: string;
}

function validateJobIds(ids: string[]): string[] {
  if (ids.length === 0) throw new ValidationError('JOB_ID', 'give at least one parked job id (see ferry inbox parked list)');
  for (const [i, id] of ids.entries()) {
    if (!isUuid(id))
      throw new ValidationError(
        `JOB_ID ${i + 1}`,
        `"${String(id).slice(0, 40)}" is not a parked job id (a UUID; see ferry inbox parked list)`,
      );
  }
  return ids;
}

async function withBoss<T>(flags: ParkedFlags, ctx: CommandContext, fn: (boss: PgBoss, pool: pg.Pool) => Promise<T>): Promise<T> {
  const bossSchema = flags.bossSchema ?? bossSchemaFor(flags.schema);
  const pool = commandPool(flags, ctx, 'ferry-inbox');
  const boss = new PgBoss({
    db: pgBossDb(pool),
    schema: bossSchema,
    supervise: false,
    schedule: false,
    migrate: false,
    createSchema: false,
  });
  boss.on('error', () => {});
  try {
    try {
      await startPgBoss(() => boss.start());
    } catch (err) {
      if (/not installed/i.test(String(err))) {
        throw new ConfigError(
          '--boss-schema',
          `no pg-boss in schema "${bossSchema}" on this database: no inbox has run with bossSchema "${bossSchema}" here; pass the inbox's --boss-schema (default <schema>_boss; earlier inboxes used pgboss)`,
          { cause: err },
        );
      }
      throw err;
    }
    return await fn(boss, pool);
  } finally {
    await boss.stop({ graceful: false, close: false }).catch(() => {});
    await pool.end();
  }
}

/**
 * `parked list`'s check that nothing parked is out of view: events under the
 * old default pg-boss schema, or counted in inbox_versions but not in the
 * --boss-schema. Read with plain SQL, before pg-boss starts: the --boss-schema
 * may hold no pg-boss at all when everything is elsewhere.
 */
async function parkedOutOfView(flags: ParkedFlags, ctx: CommandContext): Promise<ParkedElsewhere[]> {
  const pool = commandPool(flags, ctx, 'ferry-inbox');
  try {
    return await findParkedElsewhere(pool, {
      schema: flags.schema,
      bossSchema: flags.bossSchema ?? bossSchemaFor(flags.schema),
      ...(flags.consumer ? { consumer: flags.consumer } : {}),
      oldBossSchemas: [flags.oldBossSchema ?? OLD_BOSS_SCHEMA],
    });
  } finally {
    await pool.end();
  }
}

function describeParked(p: ParkedEvent): string[] {
  if (p.malformed) {
    // Not a Ferry parked event (another role's job, in a shared pg-boss schema): its JSON, ASCII only, so a terminal shows it safely.
    return [
      `${p.jobId}  ${p.consumer} ${p.state} (malformed: ${p.malformed.problem}) retries=${p.retryCount} parked_at=${p.parkedAt}`,
      `    ${p.malformed.raw}`,
    ];
  }
  const what = p.key === null ? '(undecodable: no key)' : `key=${p.key} v${p.version} ${p.type} id=${p.id}`;
  const lines = [`${p.jobId}  ${p.consumer} ${p.state} ${what} reason=${p.reason} retries=${p.retryCount} parked_at=${p.parkedAt}`];
  lines.push(`    ${p.error ?? ''}`);
  if (p.lastError) lines.push(`    last retry: ${p.lastError}`);
  return lines;
}

/**
 * Before `retry` or `discard` changes anything: the named consumer's parked
 * events among the ids that the action can change are listed (--dry-run,
 * with their selection digest; then nothing changes) or confirmed (on a
 * terminal; elsewhere --yes is required). Returns false when the command must
 * stop here, else the selection the change is held to: the one the terminal
 * asked about, or --expect-selection's (none with a bare --yes).
 */
async function confirmParked(
  action: ParkedAction,
  ids: string[],
  flags: ParkedFlags,
  ctx: CommandContext,
  boss: PgBoss,
): Promise<false | { expect?: ExpectedSelection }> {
  if (flags.consumer === undefined)
    throw new ValidationError('consumer', 'name the consumer whose parked events to change (--consumer NAME)');
  const given: ExpectedSelection | undefined = flags.expectSelection !== undefined ? { digest: flags.expectSelection } : undefined;
  if (!flags.dryRun && flags.yes) return given ? { expect: given } : {};
  const wanted = new Set(ids.map((id) => id.toLowerCase()));
  const found = (await listParked({ boss, consumer: flags.consumer, limit: 100_000 })).filter(
    (p) => wanted.has(p.jobId.toLowerCase()) && parkedEligible(action, p.state),
  );
  const selection = selectionOfSet(found.map((p) => p.jobId));
  if (flags.dryRun) {
    if (flags.json) ctx.out(JSON.stringify({ dryRun: true, [action === 'retry' ? 'wouldRetry' : 'wouldDiscard']: found, selection }));
    else {
      for (const p of found) for (const line of describeParked(p)) ctx.out(`would ${action} ${line}`);
      ctx.out(
        `selection ${selection.digest} (${found.length} parked event(s)): confirm exactly these with --yes --expect-selection ${selection.digest}`,
      );
    }
    return false;
  }
  const question = `${action} ${found.length} parked event(s) of consumer ${flags.consumer} (selection ${selection.digest.slice(0, 12)})`;
  if (!(await confirm(question))) throw new NotConfirmedError();
  return { expect: given ?? selection };
}

/** How many changed; a warning on stderr when the action could not be recorded in the audit trail. */
function settled(ctx: CommandContext, r: SettledParked): number {
  if (r.notRecorded) ctx.err(`ferry: warning: not recorded in the audit trail: ${r.notRecorded}`);
  return r.changed;
}

/** A parked action's confirmation (or --dry-run: undefined) and its change: how many parked events changed. */
function confirmAndSettle(action: ParkedAction, ids: string[], flags: ParkedFlags, ctx: CommandContext): Promise<number | undefined> {
  return withBoss(flags, ctx, async (boss, pool) => {
    const go = await confirmParked(action, ids, flags, ctx, boss);
    if (go === false) return undefined;
    return settled(
      ctx,
      await settleParked(action, {
        boss,
        pool,
        schema: flags.schema,
        bossSchema: flags.bossSchema ?? bossSchemaFor(flags.schema),
        consumer: flags.consumer as string,
        ids,
        ...(go.expect ? { expect: go.expect } : {}),
        ...cliOperator(),
      }),
    );
  });
}

/** `ferry inbox parked list|retry|discard`: the inbox's parked events, in its pg-boss queues. */
export function inboxCommand(ctx: CommandContext): Command {
  const inbox = new Command('inbox').description('operate inbox consumers: their parked events, and keys waiting for a lost version');
  const parked = new Command('parked').description(
    'events an inbox parked (handler kept failing, poison input, sequential gap): list, retry or discard them, or move them out of an old pg-boss schema',
  );
  const common = (cmd: Command) =>
    cmd
      .addOption(databaseUrlOption())
      .addOption(schemaOption())
      .addOption(inboxBossSchemaOption())
      .addOption(new Option('--consumer <name>', 'the inbox consumer (durable name)').env('FERRY_INBOX_CONSUMER').argParser(parseSchema))
      .addOption(new Option('--json', 'print JSON'));
  parked.addCommand(
    common(new Command('list').description('parked events not yet applied or discarded, oldest first; all consumers unless --consumer'))
      .addOption(
        new Option('--limit <n>', 'at most this many per consumer').default(CLI_DEFAULTS.parkedListLimit).argParser(parseIntIn(1, 100_000)),
      )
      .addOption(
        new Option('--old-boss-schema <name>', 'where earlier inbox releases parked: looked at for parked events out of view')
          .env('FERRY_OLD_BOSS_SCHEMA')
          .default(OLD_BOSS_SCHEMA)
          .argParser(parseSchema),
      )
      .addOption(outboxSchemaOption())
      .addHelpText(
        'after',
        `
It also checks that nothing parked is out of view: parked events of a consumer in the
--old-boss-schema (${OLD_BOSS_SCHEMA}, the parking lot of releases before <schema>_boss), or
counted in inbox_versions.parked but missing from the --boss-schema. Each is named on stderr
with where it is and what to do, and the exit code is 1.

And that no sequential key is stuck: one that waits for a version nothing holds (not applied,
not stored early, not parked) while later versions of it are parked or were discarded. Each is
named on stderr with the fix (the exact ferry replay when the outbox in this database, the
--outbox-schema, still holds the version; else the exact ferry inbox skip), and the exit code is 1.`,
      )
      .action(async (flags: ParkedFlags) => {
        const outOfView = await parkedOutOfView(flags, ctx);
        let rows: ParkedEvent[] = [];
        try {
          rows = await withBoss(flags, ctx, (boss) =>
            listParked({
              boss,
              ...(flags.consumer ? { consumer: flags.consumer } : {}),
              limit: flags.limit ?? CLI_DEFAULTS.parkedListLimit,
            }),
          );
        } catch (err) {
          // No pg-boss in the --boss-schema: when the events are elsewhere, saying where is the answer.
          if (!(isConfigError(err) && outOfView.length > 0)) throw err;
        }
        if (flags.json) ctx.out(JSON.stringify(rows));
        else if (rows.length === 0) ctx.out('no parked events');
        else for (const r of rows) for (const line of describeParked(r)) ctx.out(line);
        for (const f of outOfView) ctx.err(`ferry: ${f.advice}`);
        const stuck = await reportStuckKeys(flags, ctx);
        if (outOfView.length > 0) {
          throw new CommandFailedError(
            `parked events out of view for ${outOfView.map((f) => f.consumer).join(', ')}: they are not where --boss-schema ${flags.bossSchema ?? bossSchemaFor(flags.schema)} looks (see above)`,
          );
        }
        if (stuck > 0) throw new CommandFailedError(`${stuck} key(s) wait for a version nothing holds (see above)`);
      }),
  );
  const changing = (cmd: Command) =>
    common(cmd)
      .addOption(new Option('--yes', 'do not ask for confirmation (needed without a terminal)'))
      .addOption(new Option('--dry-run', 'list the parked events it would change and their selection digest, and change nothing'))
      .addOption(
        new Option('--expect-selection <digest>', 'change nothing unless the selection is exactly the one a --dry-run printed').argParser(
          parseSelectionDigest,
        ),
      )
      .addHelpText(
        'after',
        `
A confirmation (the terminal's yes, or --yes --expect-selection DIGEST after a --dry-run) changes
exactly the parked events it was shown, or nothing (exit 1) when one of them was retried, applied,
failed or discarded meanwhile.`,
      );
  parked.addCommand(
    changing(new Command('retry').description('retry parked events now, through the same gate (a failed one unblocks its key)'))
      .argument('<JOB_ID...>', 'parked job ids (ferry inbox parked list)')
      .addHelpText(
        'after',
        `
A retry in a --boss-schema other than <schema>_boss, while the consumer's queue is in
<schema>_boss, is refused (exit 2): its inboxes work that one, so nothing would retry the events
where they are. Move them first: ferry inbox parked move --from-boss-schema OLD --consumer NAME.`,
      )
      .action(async (ids: string[], flags: ParkedFlags) => {
        const valid = validateJobIds(ids);
        await refuseUnworkedRetry(flags, ctx);
        const n = await confirmAndSettle('retry', valid, flags, ctx);
        if (n === undefined) return; // --dry-run
        if (flags.json) ctx.out(JSON.stringify({ retried: n, requested: valid.length }));
        else ctx.out(`retried ${n} of ${valid.length} parked event(s)`);
        if (n < valid.length) throw new CommandFailedError(`${valid.length - n} of ${valid.length} ids were not failed parked events`);
      }),
  );
  parked.addCommand(
    changing(
      new Command('discard').description(
        'delete parked events for good; in sequential mode each discarded version, and only it, counts as skipped (an earlier missing version still applies when it comes)',
      ),
    )
      .argument('<JOB_ID...>', 'parked job ids (ferry inbox parked list)')
      .action(async (ids: string[], flags: ParkedFlags) => {
        const valid = validateJobIds(ids);
        const keys = await parkedJobKeys(flags, ctx, valid);
        const n = await confirmAndSettle('discard', valid, flags, ctx);
        // A key whose missing version lies below the discarded ones does not move on: say what remains to decide.
        await adviseAfterDiscard(flags, ctx, keys, n === undefined);
        if (n === undefined) return; // --dry-run
        if (flags.json) ctx.out(JSON.stringify({ discarded: n, requested: valid.length }));
        else ctx.out(`discarded ${n} of ${valid.length} parked event(s)`);
      }),
  );
  parked.addCommand(parkedMoveCommand(changing(new Command('move')), ctx, { withBoss, describeParked }));
  inbox.addCommand(parked);
  const skip = inboxSkipCommand(ctx);
  inbox.addCommand(skip);
  for (const cmd of [parked, ...parked.commands, skip]) {
    cmd.exitOverride().configureOutput({ writeOut: (t) => ctx.out(t.trimEnd()), writeErr: (t) => ctx.err(t.trimEnd()) });
  }
  return inbox;
}
