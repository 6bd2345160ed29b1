// ferry inbox skip: accept a sequential key's missing versions as lost (issue 43, item 1), and the
// advice `ferry inbox parked list|discard` give when a key waits for a version nothing holds. The
// preview and the change are the shared action (actions/skip.ts), which `ferry console` calls too.
import { bossSchemaFor, quoteIdentifier, SQLSTATE, sqlState, ValidationError } from '@ferry/core';
import { findStuckKeys, type KeyGap, parkQueueName, readKeyGaps } from '@ferry/inbox';
import { Command, InvalidArgumentError, Option } from 'commander';
import type pg from 'pg';
import { cliOperator } from '../actions/audit.js';
import type { ExpectedSelection } from '../actions/selection.js';
import { describeOutbox, previewSkip, type SkipPreview, type SkipTarget, settleSkip, skipCommand } from '../actions/skip.js';
import { commandPool } from '../cli/database.js';
import { CLI_DEFAULTS } from '../cli/defaults.js';
import { parseSchema, parseSelectionDigest } from '../cli/flag-parsers.js';
import { databaseUrlOption, inboxBossSchemaOption, schemaOption } from '../cli/shared-options.js';
import { confirm } from '../confirm.js';
import type { CommandContext } from '../context.js';
import { CommandFailedError, NotConfirmedError } from '../errors.js';

interface SkipFlags {
  databaseUrl?: string;
  schema: string;
  bossSchema?: string;
  outboxSchema?: string;
  consumer?: string;
  key?: string;
  through?: bigint;
  json?: boolean;
  yes?: boolean;
  dryRun?: boolean;
  skipReplayable?: boolean;
  expectSelection?: string;
}

/** Stuck keys `parked list` describes in full (the outbox looked up for each); the rest are counted. */
const STUCK_DESCRIBED = 20;

function parseVersion(value: string): bigint {
  if (!/^\d{1,19}$/.test(value.trim()) || BigInt(value.trim()) < 1n || BigInt(value.trim()) > 9_223_372_036_854_775_807n)
    throw new InvalidArgumentError(`${JSON.stringify(value.slice(0, 40))} is not a version (an integer from 1 to 9223372036854775807)`);
  return BigInt(value.trim());
}

/** `--outbox-schema`: where the producer's outbox is in this database, for the replay a skip offers first. */
export function outboxSchemaOption(): Option {
  return new Option(
    '--outbox-schema <name>',
    'schema of the outbox in this database, looked up for a replay of the missing versions (default --schema)',
  )
    .env('FERRY_OUTBOX_SCHEMA')
    .argParser(parseSchema);
}

function target(flags: SkipFlags, consumer: string, key: string): SkipTarget {
  return {
    schema: flags.schema,
    bossSchema: flags.bossSchema ?? bossSchemaFor(flags.schema),
    outboxSchema: flags.outboxSchema ?? flags.schema,
    consumer,
    key,
  };
}

const defaults = (flags: SkipFlags) => ({ schema: CLI_DEFAULTS.schema, bossSchema: bossSchemaFor(flags.schema) });

function held(g: KeyGap): string {
  if (g.held.length === 0) return 'nothing held above it';
  const shown = g.held.map((h) => `${h.version} (${h.place}${h.state ? `, ${h.state}` : ''})`).join(', ');
  const more = g.parked + g.early - g.held.length;
  return `held above it: ${shown}${more > 0 ? ` and ${more} more` : ''}`;
}

/** The preview, one line each: the key, what holds its later versions, the outbox, what the skip does. */
function describePreview(p: SkipPreview, t: SkipTarget): string[] {
  const g = p.gap;
  const lines = [
    `consumer ${t.consumer}: key ${JSON.stringify(t.key)} is at version ${g.recorded} and waits for version ${g.waitsFor}${g.nextHeld ? ' (held)' : ', which nothing holds (not applied, not stored early, not parked)'}; ${held(g)}${
      g.discarded.length > 0 ? `; discarded: ${g.discarded.join(', ')}` : ''
    }`,
  ];
  lines.push(...describeOutbox(p, t.outboxSchema ?? t.schema));
  if (p.range) {
    lines.push(
      `would skip version(s) ${p.range.from}..${p.range.through} of key ${JSON.stringify(t.key)} as lost: they are never applied, and a copy arriving later is dropped as stale; the key's stored and parked versions after them apply in order`,
    );
  }
  return lines;
}

/** The one line per stuck key: what it waits for, what waits behind it, the replay (when the outbox has it) and the skip. */
export async function stuckAdvice(pool: pg.Pool, flags: SkipFlags, g: KeyGap): Promise<string> {
  const t = target(flags, g.consumer, g.key);
  const through = g.missing?.through ?? g.waitsFor;
  const p = await previewSkip(pool, t, through);
  const published = p.outbox.filter((r) => r.state === 'published').map((r) => r.version);
  const behind = `${g.parked} parked, ${g.early} stored early${g.discarded.length > 0 ? `, ${g.discarded.length} discarded` : ''}`;
  const skip = `${skipCommand({ ...t, through, defaults: defaults(flags) })} --dry-run`;
  const first =
    p.replay && published.length > 0
      ? `the outbox still holds version(s) ${published.join(', ')}: replay first, then nothing is lost: ${p.replay}; if it is lost for good: ${skip}`
      : `the outbox (schema ${t.outboxSchema}) does not hold it to replay; accept it as lost: ${skip}`;
  return `consumer ${g.consumer}: key ${JSON.stringify(g.key)} waits for version ${g.waitsFor}, which nothing holds (not applied, not stored early, not parked), and cannot move on (${behind} after it): ${first}`;
}

/**
 * `parked list`'s check for keys that wait for a version nothing holds: each named on stderr with
 * its fix. Returns how many there are.
 */
export async function reportStuckKeys(flags: SkipFlags, ctx: CommandContext): Promise<number> {
  const pool = commandPool(flags, ctx, 'ferry-inbox');
  try {
    let stuck: KeyGap[];
    try {
      stuck = await findStuckKeys(pool, {
        schema: flags.schema,
        bossSchema: flags.bossSchema ?? bossSchemaFor(flags.schema),
        ...(flags.consumer ? { consumer: flags.consumer } : {}),
      });
    } catch (err) {
      // A role that may list the parking lot but not read the inbox tables still gets its list, told what was not checked.
      if (sqlState(err) !== SQLSTATE.insufficientPrivilege) throw err;
      ctx.err(`ferry: warning: not checked for keys waiting on a missing version: ${(err as Error).message}`);
      return 0;
    }
    for (const g of stuck.slice(0, STUCK_DESCRIBED)) ctx.err(`ferry: ${await stuckAdvice(pool, flags, g)}`);
    if (stuck.length > STUCK_DESCRIBED)
      ctx.err(
        `ferry: ${stuck.length - STUCK_DESCRIBED} more key(s) wait for a version nothing holds: see each with ferry inbox skip --dry-run`,
      );
    return stuck.length;
  } finally {
    await pool.end();
  }
}

/** The keys of parked jobs (read before a discard deletes them). */
export async function parkedJobKeys(flags: SkipFlags, ctx: CommandContext, ids: readonly string[]): Promise<string[]> {
  if (flags.consumer === undefined) return [];
  const pool = commandPool(flags, ctx, 'ferry-inbox');
  try {
    const job = `${quoteIdentifier(flags.bossSchema ?? bossSchemaFor(flags.schema))}.job`;
    const { rows } = await pool.query<{ key: string }>(
      `SELECT DISTINCT singleton_key AS key FROM ${job} WHERE name = $1 AND id::text = ANY ($2::text[]) AND singleton_key IS NOT NULL`,
      [parkQueueName(flags.consumer), ids.map((id) => id.toLowerCase())],
    );
    return rows.map((r) => r.key).sort();
  } catch {
    return []; // advice only: a parking lot this role cannot read gets none
  } finally {
    await pool.end();
  }
}

/**
 * After (or, with `dryRun`, before) a discard: each of `keys` whose next version nothing holds
 * while later ones wait, named on stderr with the exact skip that moves it on.
 */
export async function adviseAfterDiscard(flags: SkipFlags, ctx: CommandContext, keys: readonly string[], dryRun: boolean): Promise<void> {
  if (flags.consumer === undefined || keys.length === 0) return;
  const pool = commandPool(flags, ctx, 'ferry-inbox');
  try {
    const gaps = await readKeyGaps(pool, {
      schema: flags.schema,
      bossSchema: flags.bossSchema ?? bossSchemaFor(flags.schema),
      consumer: flags.consumer,
      keys,
    });
    for (const g of gaps) {
      if (g.nextHeld || (!dryRun && !g.stuck)) continue;
      if (dryRun && g.parked + g.discarded.length === 0) continue;
      const lead = dryRun
        ? `key ${JSON.stringify(g.key)} waits for version ${g.waitsFor}, which nothing holds: discarding its parked events does not move it on. `
        : '';
      ctx.err(`ferry: ${lead}${await stuckAdvice(pool, flags, g)}`);
    }
  } finally {
    await pool.end();
  }
}

async function runSkip(flags: SkipFlags, ctx: CommandContext): Promise<void> {
  if (flags.consumer === undefined) throw new ValidationError('consumer', 'name the consumer (--consumer NAME)');
  if (flags.key === undefined || flags.key === '')
    throw new ValidationError('key', 'name the key whose missing versions to skip (--key KEY)');
  const t = target(flags, flags.consumer, flags.key);
  const pool = commandPool(flags, ctx, 'ferry-inbox');
  try {
    const p = await previewSkip(pool, t, flags.through);
    const lines = describePreview(p, t);
    const through = p.range?.through;
    if (p.refusal !== undefined || through === undefined) {
      if (flags.json) ctx.out(JSON.stringify(jsonPreview(p, flags.dryRun ?? false)));
      else for (const l of lines) ctx.out(l);
      throw new ValidationError('through', p.refusal ?? 'nothing to skip');
    }
    // The outbox still has a missing version (sent already: a replay re-sends it; not yet: the relay or ferry dlq retry will).
    const replayable = p.outbox.some((r) => r.state !== 'discarded');
    if (flags.dryRun) {
      if (flags.json) ctx.out(JSON.stringify(jsonPreview(p, true)));
      else {
        for (const l of lines) ctx.out(l);
        ctx.out(
          `selection ${p.selection.digest}: skip exactly this with ${skipCommand({ ...t, through, defaults: defaults(flags) }, ` --yes --expect-selection ${p.selection.digest}${replayable ? ' --skip-replayable' : ''}`)}`,
        );
      }
      return;
    }
    if (replayable && !flags.skipReplayable) {
      for (const l of describeOutbox(p, t.outboxSchema ?? t.schema)) ctx.err(`ferry: ${l}`);
      throw new CommandFailedError(
        `nothing done: the outbox still holds missing version(s) of key ${JSON.stringify(t.key)}: send them (above), or, to skip them anyway, add --skip-replayable`,
      );
    }
    let expect: ExpectedSelection | undefined = flags.expectSelection !== undefined ? { digest: flags.expectSelection } : undefined;
    if (!flags.yes) {
      for (const l of lines) ctx.err(l);
      const question = `skip version(s) ${p.range?.from}..${through} of key ${JSON.stringify(t.key)} of consumer ${t.consumer} as lost`;
      if (!(await confirm(question))) throw new NotConfirmedError();
      expect ??= p.selection;
    }
    const r = await settleSkip({ ...t, pool, through, ...(expect ? { expect } : {}), ...cliOperator() });
    if (r.notRecorded) ctx.err(`ferry: warning: not recorded in the audit trail: ${r.notRecorded}`);
    const d = r.done;
    if (flags.json)
      ctx.out(
        JSON.stringify({
          consumer: d.consumer,
          key: d.key,
          skipped: { from: d.from.toString(), through: d.through.toString() },
          recordedBefore: d.recordedBefore.toString(),
          recorded: d.recorded.toString(),
          woken: d.woken,
        }),
      );
    else
      ctx.out(
        `skipped version(s) ${d.from}..${d.through} of key ${JSON.stringify(d.key)} (consumer ${d.consumer}): it is at version ${d.recorded} now; its stored and parked later versions apply in order (${d.woken} parked event(s) made due now)`,
      );
  } finally {
    await pool.end();
  }
}

function jsonPreview(p: SkipPreview, dryRun: boolean): Record<string, unknown> {
  const g = p.gap;
  return {
    dryRun,
    consumer: g.consumer,
    key: g.key,
    recorded: g.recorded.toString(),
    waitsFor: g.waitsFor.toString(),
    nextHeld: g.nextHeld,
    parked: g.parked,
    early: g.early,
    discarded: g.discarded.map(String),
    held: g.held.map((h) => ({ ...h, version: h.version.toString() })),
    ...(p.range ? { wouldSkip: { from: p.range.from.toString(), through: p.range.through.toString() } } : {}),
    ...(p.refusal ? { refusal: p.refusal } : {}),
    outbox: p.outbox,
    ...(p.replay ? { replay: p.replay } : {}),
    selection: p.selection,
  };
}

const HELP_AFTER = `
In sequential mode a key applies only the version after the one it recorded. A version
that never reaches the stream holds its key for good: the versions after it wait stored
early, then parked ("waits for version N"), and discarding them does not move the key.
This accepts the key's missing versions as lost: every version from the key's next one
through --through counts as applied (a copy arriving later is dropped as stale), and
the key's stored and parked later versions then apply in version order, once (the
inbox's park worker and early-version sweep pick them up within a poll).

--through defaults to the version below the lowest one the key holds (stored early or
parked) or had discarded: exactly the missing ones. A range that holds a version the
inbox has (stored early or parked) is refused: that one is not lost.

Replay first: when the outbox in this database (--outbox-schema, default --schema) still
holds a missing version, the preview prints the exact ferry replay that sends it again
(or, for one not published yet, the ferry dlq retry that unblocks it), and the skip is
refused unless --skip-replayable.

It previews, then asks on a terminal; elsewhere pass --yes. --dry-run only previews and
prints the selection digest: --yes --expect-selection DIGEST then skips exactly that
(nothing, exit 1, when the key moved meanwhile). Each skip is recorded in the schema's
operator_actions (action inbox.skip).

Exit codes: 0 skipped (or previewed); 1 not done (the key moved since the preview, the
outbox still holds a missing version, a server unreachable); 2 bad usage: nothing to
skip, --through over a held version, no --yes without a terminal.

Example:
  ferry inbox skip --consumer billing --key order-42 --dry-run
  ferry inbox skip --consumer billing --key order-42 --through 2 --yes --expect-selection <digest>`;

/** `ferry inbox skip`. */
export function inboxSkipCommand(ctx: CommandContext): Command {
  return new Command('skip')
    .description("accept a sequential key's missing versions as lost, so its later versions apply (preview first)")
    .addOption(databaseUrlOption())
    .addOption(schemaOption())
    .addOption(inboxBossSchemaOption())
    .addOption(outboxSchemaOption())
    .addOption(new Option('--consumer <name>', 'the inbox consumer (durable name)').env('FERRY_INBOX_CONSUMER').argParser(parseSchema))
    .addOption(new Option('--key <key>', 'the event key that waits for a missing version'))
    .addOption(
      new Option(
        '--through <version>',
        'the last version to accept as lost (default: the last missing one before a held version)',
      ).argParser(parseVersion),
    )
    .addOption(
      new Option(
        '--skip-replayable',
        'skip even versions the outbox still holds (by default the skip is refused and their replay, or dlq retry, is offered instead)',
      ),
    )
    .addOption(new Option('--json', 'print JSON'))
    .addOption(new Option('--yes', 'do not ask for confirmation (needed without a terminal)'))
    .addOption(new Option('--dry-run', 'show what the key waits for and what the skip would do, and change nothing'))
    .addOption(
      new Option(
        '--expect-selection <digest>',
        'change nothing unless the key and range are exactly the ones a --dry-run printed',
      ).argParser(parseSelectionDigest),
    )
    .addHelpText('after', HELP_AFTER)
    .action((flags: SkipFlags) => runSkip(flags, ctx));
}
