// ferry replay: the flags, the confirmation and the report. The selection, its count and the per-key
// pipelined publish are the shared action (actions/replay.ts), which `ferry console` calls too.
import { replayMsgIdSuffix } from '@ferry/core';
import { Command, InvalidArgumentError, Option } from 'commander';
import { cliOperator } from '../actions/audit.js';
import { checkReplaySelection, previewReplay, type ReplayReport, type ReplaySelection, replayEvents } from '../actions/replay.js';
import type { ExpectedSelection } from '../actions/selection.js';
import { commandPool, requireOutbox } from '../cli/database.js';
import { CLI_DEFAULTS } from '../cli/defaults.js';
import { parseIntIn, parseSelectionDigest } from '../cli/flag-parsers.js';
import { connectNats } from '../cli/nats-connection.js';
import { addDatabaseOptions, addNatsOptions, type DatabaseFlags, type NatsFlags } from '../cli/shared-options.js';
import { parseTimeFlag } from '../cli/time-flag.js';
import { confirm } from '../confirm.js';
import type { CommandContext } from '../context.js';
import { count } from '../count.js';
import { CommandFailedError, NotConfirmedError } from '../errors.js';
import { shellQuote } from '../shell-quote.js';
import { Progress, type ProgressMode } from './replay-progress.js';

export type { ReplayReport } from '../actions/replay.js';
export type { ReplayFailure } from './replay-resume.js';

interface ReplayFlags
  extends DatabaseFlags,
    NatsFlags,
    Pick<ReplaySelection, 'fromSeq' | 'toSeq' | 'since' | 'until' | 'key' | 'subjectPrefix'> {
  maxInFlight: number;
  publishTimeoutMs: number;
  dryRun?: boolean;
  keepGoing?: boolean;
  /** The selection digest a --dry-run printed: send nothing unless the selection is still exactly that. */
  expectSelection?: string;
  yes?: boolean;
  progress: ProgressMode;
}

function parseSeq(value: string): bigint {
  if (!/^\d{1,19}$/.test(value.trim()))
    throw new InvalidArgumentError(`${JSON.stringify(value)} is not an outbox seq (a positive integer)`);
  return BigInt(value.trim());
}

const HELP_AFTER = `
Re-publishes retained (published, not discarded) outbox rows, in seq order, for
a consumer that lost its data. The filters combine (AND); give at least one.
--since/--until compare the row's insert time (created_at); --until is exclusive.
Their times need a zone (2026-11-29T21:00:00Z, or +01:00): one without is
refused rather than read in the host's local time. A duration is a time back
from now, fixed when the command starts: --since 2h --until 10m.
The run covers the rows selected when it starts (up to the highest seq then).

Each copy carries the original event id in ce-id but a new Nats-Msg-Id
(<event id>:replay:<run time>), so the stream stores it even inside its
duplicate window; consumers' inboxes drop the events they already applied.
Every consumer of the stream sees the copies: scope with --key/--subject-prefix.
Rows already pruned (older than the outbox's retention) cannot be replayed.

Keys pipeline (up to --max-in-flight copies), but one key's copies go out one
at a time: its next copy only after the previous one is acknowledged. When a
copy fails (over max_payload, rejected, timed out), none of its key's later
copies is sent and the run stops (with --keep-going: the other keys go on).
The report then names the failures and prints the exact commands (the same
filters, narrowed) that send what was not sent, and nothing twice.

Each run is recorded in the schema's operator_actions (who, the filters, the
copies acknowledged, the outcome), as the console's replays are.

It counts the selected events, then asks for confirmation on a terminal;
elsewhere pass --yes (without it nothing is sent, exit 2). --dry-run only
counts, and prints the selection's digest: --yes --expect-selection DIGEST
then sends exactly those events or nothing (exit 1 when the selection
changed), as the terminal's yes does with what it asked about. An empty
--subject-prefix is refused (it would select everything).

Exit codes:
  0  every selected event was replayed (or counted, with --dry-run)
  1  incomplete: a publish failed, or selected rows vanished during the run
     (pruned or discarded); or a server is unreachable
  2  bad usage: no filter, an invalid value, --from-seq after --to-seq, no --yes without a terminal

Examples:
  ferry replay --from-seq 1000 --to-seq 2000 --dry-run
  ferry replay --from-seq 1000 --to-seq 2000 --yes
  ferry replay --since 2026-11-29T08:00:00Z --until 2026-11-29T09:00:00Z --subject-prefix orders.
  ferry replay --key order-42 --json`;

export function replayCommand(ctx: CommandContext): Command {
  return addNatsOptions(
    addDatabaseOptions(new Command('replay').description('re-publish retained outbox events by seq range, time range or key')),
  )
    .addOption(new Option('--from-seq <seq>', 'first outbox seq (inclusive)').argParser(parseSeq))
    .addOption(new Option('--to-seq <seq>', 'last outbox seq (inclusive)').argParser(parseSeq))
    .addOption(
      new Option(
        '--since <time>',
        'rows inserted at or after this ISO time, with its zone (Z or +hh:mm), or this long ago (10m, 2h, 1d)',
      ).argParser(parseTimeFlag),
    )
    .addOption(
      new Option(
        '--until <time>',
        'rows inserted before this ISO time, with its zone (Z or +hh:mm), or this long ago (10m, 2h, 1d)',
      ).argParser(parseTimeFlag),
    )
    .addOption(new Option('--key <key>', 'only this event key'))
    .addOption(new Option('--subject-prefix <prefix>', 'only subjects starting with this text, e.g. orders.'))
    .addOption(
      new Option('--max-in-flight <n>', 'published, not yet acknowledged copies at most (1-10000)')
        .default(CLI_DEFAULTS.replayMaxInFlight)
        .argParser(parseIntIn(1, 10_000)),
    )
    .addOption(
      new Option('--publish-timeout-ms <ms>', 'how long to wait for one PubAck')
        .default(CLI_DEFAULTS.replayPublishTimeoutMs)
        .argParser(parseIntIn(100, 600_000)),
    )
    .addOption(new Option('--dry-run', 'count the selected events and publish nothing'))
    .addOption(new Option('--yes', 'do not ask for confirmation (needed without a terminal)'))
    .addOption(
      new Option('--expect-selection <digest>', 'send nothing unless the selection is exactly the one a --dry-run printed').argParser(
        parseSelectionDigest,
      ),
    )
    .addOption(new Option('--keep-going', "after a failure, go on with the other keys (the failed key's later events are not sent)"))
    .addOption(
      new Option('--progress <mode>', 'auto: a bar on a terminal, plain lines otherwise (on stderr)')
        .choices(['auto', 'bar', 'lines', 'none'])
        .default(CLI_DEFAULTS.replayProgress),
    )
    .addHelpText('after', HELP_AFTER)
    .action((flags: ReplayFlags) => runReplay(flags, ctx));
}

async function runReplay(flags: ReplayFlags, ctx: CommandContext): Promise<void> {
  const sel: ReplaySelection = {
    ...(flags.fromSeq !== undefined ? { fromSeq: flags.fromSeq } : {}),
    ...(flags.toSeq !== undefined ? { toSeq: flags.toSeq } : {}),
    ...(flags.since ? { since: flags.since } : {}),
    ...(flags.until ? { until: flags.until } : {}),
    ...(flags.key !== undefined ? { key: flags.key } : {}),
    ...(flags.subjectPrefix !== undefined ? { subjectPrefix: flags.subjectPrefix } : {}),
  };
  checkReplaySelection(sel);
  const pool = commandPool(flags, ctx, 'ferry-replay');
  const started = Date.now();
  let report: ReplayReport = {
    matched: 0,
    replayed: 0,
    firstSeq: null,
    lastSeq: null,
    msgIdSuffix: replayMsgIdSuffix(new Date(started)),
    durationMs: 0,
    dryRun: Boolean(flags.dryRun),
    failed: null,
    failures: [],
    skipped: 0,
    vanished: 0,
    resume: [],
  };
  try {
    await requireOutbox(pool, flags.schema);
    // The count and the run are the shared action's (the console calls them too).
    const preview = await previewReplay(pool, flags.schema, sel);
    report = { ...report, ...preview };
    // What a confirmation holds the run to: the selection it asked about, or the one --dry-run printed.
    let expect: ExpectedSelection | undefined = flags.expectSelection !== undefined ? { digest: flags.expectSelection } : undefined;
    if (!flags.dryRun && (preview.matched > 0 || expect !== undefined)) {
      // Every consumer of these subjects receives the copies again: asked on a terminal, --yes elsewhere.
      const question = `replay ${preview.matched} events (seq ${preview.firstSeq}..${preview.lastSeq}) to every consumer of their subjects (selection ${preview.selection?.digest.slice(0, 12)})`;
      if (!flags.yes) {
        if (!(await confirm(question))) throw new NotConfirmedError();
        expect ??= preview.selection;
      }
      const nc = await connectNats(flags, 'ferry-replay');
      const progress = new Progress(flags.progress, preview.matched, ctx);
      try {
        report = await replayEvents(pool, nc, flags.schema, sel, preview, {
          ...cliOperator(),
          maxInFlight: flags.maxInFlight,
          publishTimeoutMs: flags.publishTimeoutMs,
          keepGoing: Boolean(flags.keepGoing),
          onAck: (n) => progress.update(n),
          ...(expect ? { expect } : {}),
        });
        progress.update(report.replayed, true);
      } finally {
        await nc.close();
      }
      if (report.notRecorded) ctx.err(`ferry replay: not recorded in the audit trail: ${report.notRecorded}`);
    }
  } finally {
    await pool.end();
  }
  report.durationMs = Date.now() - started;
  if (flags.json) ctx.out(JSON.stringify(report));
  else if (flags.dryRun)
    ctx.out(
      `would replay ${count(report.matched, 'event')} (seq ${report.firstSeq ?? '-'}..${report.lastSeq ?? '-'}); selection ${report.selection?.digest}: confirm exactly these with --yes --expect-selection ${report.selection?.digest}`,
    );
  else {
    const rate = Math.round(report.replayed / Math.max(0.001, report.durationMs / 1000));
    ctx.out(
      `replayed ${report.replayed} of ${count(report.matched, 'event')} (seq ${report.firstSeq ?? '-'}..${report.lastSeq ?? '-'}) in ${(report.durationMs / 1000).toFixed(1)} s (${rate}/s); Nats-Msg-Id <event id>${report.msgIdSuffix}`,
    );
  }
  const problems: string[] = [];
  if (report.failed) {
    problems.push(
      `${report.failures.length} publish(es) failed, the first at seq ${report.failed.seq} (event ${report.failed.id}, key ${JSON.stringify(report.failed.key)}): ${report.failed.error}; ${report.skipped} later events were not sent`,
    );
  }
  if (report.vanished > 0) {
    problems.push(
      `${report.vanished} selected events vanished before they were read (pruned after the retention, or discarded) and were not replayed`,
    );
  }
  if (problems.length > 0) {
    const hint =
      report.resume.length > 0
        ? `; fix it, then send exactly what was not sent with the same connection options: ${report.resume.map((args) => `ferry replay ${args.map(shellQuote).join(' ')}`).join(' ; ')}`
        : '';
    throw new CommandFailedError(`replay incomplete: ${problems.join('; ')}${hint}`);
  }
}
