// ferry replay: the filters, the confirmation and the per-key pipelined publish share one report, so
// they stay in one file (just over ~350 lines); the progress bar and the resume commands live apart.
import { ConfigError, encodedSize, encodeEvent, eventFromOutboxRow, LIMITS, quoteIdentifier, replayMsgIdSuffix } from '@ferry/core';
import { headers as natsHeaders } from '@nats-io/transport-node';
import { Command, InvalidArgumentError, Option } from 'commander';
import { commandPool, requireOutbox } from '../cli/database.js';
import { CLI_DEFAULTS } from '../cli/defaults.js';
import { parseIntIn } from '../cli/flag-parsers.js';
import { connectNats } from '../cli/nats-connection.js';
import { addDatabaseOptions, addNatsOptions, type DatabaseFlags, type NatsFlags } from '../cli/shared-options.js';
import { parseTimeFlag } from '../cli/time-flag.js';
import { confirm } from '../confirm.js';
import type { CommandContext } from '../context.js';
import { count } from '../count.js';
import { PubAcks } from '../daemon/pub-acks.js';
import { CommandFailedError, NotConfirmedError } from '../errors.js';
import type { BoundedOutboxEventRow } from '../sql/outbox-event-columns.js';
import { countReplaySql, replayPageSql } from '../sql/replay-rows.js';
import { Progress, type ProgressMode } from './replay-progress.js';
import { type ReplayFailure, resumeCommands, shellQuote } from './replay-resume.js';

export type { ReplayFailure } from './replay-resume.js';

interface ReplayFlags extends DatabaseFlags, NatsFlags {
  fromSeq?: bigint;
  toSeq?: bigint;
  since?: Date;
  until?: Date;
  key?: string;
  subjectPrefix?: string;
  maxInFlight: number;
  publishTimeoutMs: number;
  dryRun?: boolean;
  keepGoing?: boolean;
  yes?: boolean;
  progress: ProgressMode;
}

/** The `--json` output of `ferry replay`. */
export interface ReplayReport {
  /** Retained events the filters select. */
  matched: number;
  /** Copies acknowledged by JetStream. */
  replayed: number;
  firstSeq: string | null;
  lastSeq: string | null;
  /** Each copy's `Nats-Msg-Id` is `<event id>` followed by this suffix. */
  msgIdSuffix: string;
  durationMs: number;
  dryRun: boolean;
  /** The first publish that failed (lowest seq); none of its key's later events was sent. */
  failed: ReplayFailure | null;
  /** Every publish that failed, in seq order (one per key at most). */
  failures: ReplayFailure[];
  /** Selected events not sent because of a failure: the failed keys' later events, and all after a stop. */
  skipped: number;
  /** Selected events deleted before they were read (pruned after the retention, or discarded). */
  vanished: number;
  /** Argument lists (add the connection options) that send exactly the events not sent; empty when none. */
  resume: string[][];
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

It counts the selected events, then asks for confirmation on a terminal;
elsewhere pass --yes (without it nothing is sent, exit 2). --dry-run only
counts. An empty --subject-prefix is refused (it would select everything).

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

interface Row extends BoundedOutboxEventRow {
  seq: string;
}

/** Data bytes one page of the selection may load: pages are cut by bytes as well as rows. */
const PAGE_BYTES = 64 * 1024 * 1024;

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
  const { fromSeq, toSeq, since, until, key, subjectPrefix } = flags;
  if ([fromSeq, toSeq, since, until, key, subjectPrefix].every((v) => v === undefined)) {
    throw new ConfigError('--from-seq', 'give a range: --from-seq/--to-seq, --since/--until, --key or --subject-prefix');
  }
  if (fromSeq !== undefined && toSeq !== undefined && fromSeq > toSeq) {
    throw new ConfigError('--from-seq', `--from-seq ${fromSeq} is after --to-seq ${toSeq}`);
  }
  if (subjectPrefix !== undefined && subjectPrefix.length === 0) {
    throw new ConfigError(
      '--subject-prefix',
      'an empty --subject-prefix selects every subject: give the prefix you mean (e.g. orders.), or --from-seq 1 to replay everything on purpose',
    );
  }
  if (since && until && since >= until) {
    throw new ConfigError('--since', `--since ${since.toISOString()} is not before --until ${until.toISOString()}`);
  }
  const conditions = ['published_at IS NOT NULL', 'dead_at IS NULL'];
  const values: unknown[] = [];
  const add = (sql: string, value: unknown) => {
    values.push(value);
    conditions.push(sql.replace('?', `$${values.length}`));
  };
  if (fromSeq !== undefined) add('seq >= ?::bigint', fromSeq.toString());
  if (toSeq !== undefined) add('seq <= ?::bigint', toSeq.toString());
  if (since) add('created_at >= ?', since);
  if (until) add('created_at < ?', until);
  if (key !== undefined) add('key = ?', key);
  if (subjectPrefix !== undefined) add('starts_with(subject, ?)', subjectPrefix);
  const where = conditions.join(' AND ');

  const pool = commandPool(flags, ctx, 'ferry-replay');
  const started = Date.now();
  const report: ReplayReport = {
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
    const schemaSql = quoteIdentifier(flags.schema);
    const counted = await pool.query<{ n: string; first: string | null; last: string | null }>(countReplaySql(schemaSql, where), values);
    report.matched = Number(counted.rows[0]?.n ?? 0);
    report.firstSeq = counted.rows[0]?.first ?? null;
    report.lastSeq = counted.rows[0]?.last ?? null;
    if (!flags.dryRun && report.matched > 0) {
      // Every consumer of these subjects receives the copies again: asked on a terminal, --yes elsewhere.
      const question = `replay ${report.matched} events (seq ${report.firstSeq}..${report.lastSeq}) to every consumer of their subjects`;
      if (!flags.yes && !(await confirm(question))) throw new NotConfirmedError();
      await publishAll(flags, ctx, pool, schemaSql, where, values, report);
    }
  } finally {
    await pool.end();
  }
  report.durationMs = Date.now() - started;
  if (flags.json) ctx.out(JSON.stringify(report));
  else if (flags.dryRun)
    ctx.out(`would replay ${count(report.matched, 'event')} (seq ${report.firstSeq ?? '-'}..${report.lastSeq ?? '-'})`);
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

async function publishAll(
  flags: ReplayFlags,
  ctx: CommandContext,
  pool: import('pg').Pool,
  schemaSql: string,
  where: string,
  values: unknown[],
  report: ReplayReport,
): Promise<void> {
  const nc = await connectNats(flags, 'ferry-replay');
  const acks = new PubAcks(nc, flags.publishTimeoutMs);
  const progress = new Progress(flags.progress, report.matched, ctx);
  const inFlight = new Set<Promise<void>>();
  /** Each key's latest send, settled once its outcome is recorded. */
  const lastOfKey = new Map<string, Promise<void>>();
  const failedKeys = new Set<string>();
  let stop = false;
  let read = 0;
  let lastAttempted = 0n;
  let maxAcked: bigint | null = null;
  const fail = (row: Row, error: string) => {
    report.failures.push({ seq: row.seq, id: row.id, key: row.key, error });
    failedKeys.add(row.key);
    if (!flags.keepGoing) stop = true;
  };
  // The run's upper bound is the last seq counted, so rows published meanwhile do not join it
  // and every counted row that is not read was deleted during the run (vanished).
  const upTo = report.lastSeq ?? '0';
  try {
    let cursor = '0';
    const page = 500;
    pages: while (!stop) {
      const maxPayload = nc.info?.max_payload ?? LIMITS.maxEventBytes;
      const { rows } = await pool.query<Row>(replayPageSql(schemaSql, where, values.length, page), [
        ...values,
        cursor,
        upTo,
        Math.min(maxPayload, LIMITS.maxEventBytes),
        PAGE_BYTES,
      ]);
      for (const row of rows) {
        read++;
        // A key's next row goes out only after its previous one is acknowledged: a failure
        // (refused here, rejected by the server, or timed out) must stop the key's later rows
        // before they are sent, or they reach the stream ahead of it.
        const previous = lastOfKey.get(row.key);
        if (previous) await previous;
        if (stop) break pages;
        if (failedKeys.has(row.key)) continue; // --keep-going: this key stopped at its failure
        while (inFlight.size >= flags.maxInFlight) await Promise.race(inFlight);
        if (stop) break pages;
        lastAttempted = BigInt(row.seq);
        if (row.data === null) {
          fail(row, `the event's data is ${row.data_bytes} bytes, over the NATS server's max_payload of ${maxPayload}; it was not loaded`);
          continue;
        }
        const event = eventFromOutboxRow({ ...row, data: row.data });
        const encoded = encodeEvent(event, { msgId: `${row.id}${report.msgIdSuffix}` });
        // Checked here, before sending, on the copy's real wire size (its longer Nats-Msg-Id counted).
        const size = encodedSize(encoded);
        if (size > maxPayload) {
          fail(row, `the copy encodes to ${size} bytes, over the NATS server's max_payload of ${maxPayload}`);
          continue;
        }
        const h = natsHeaders();
        for (const [name, value] of encoded.headers) h.set(name, value);
        // Sent in seq order on one connection, so the copies reach the stream in seq order.
        const p = acks.publish(encoded.subject, encoded.body, h).then(
          () => {
            report.replayed++;
            const seq = BigInt(row.seq);
            if (maxAcked === null || seq > maxAcked) maxAcked = seq;
            progress.update(report.replayed);
          },
          (err: Error) => fail(row, err.message),
        );
        const tracked = p.finally(() => {
          inFlight.delete(tracked);
          if (lastOfKey.get(row.key) === tracked) lastOfKey.delete(row.key);
        });
        inFlight.add(tracked);
        lastOfKey.set(row.key, tracked);
      }
      if (rows.length === 0) break; // a page cut by bytes is short, and not the last one
      cursor = rows.at(-1)?.seq ?? cursor;
    }
    await Promise.all(inFlight);
    progress.update(report.replayed, true);
    report.failures.sort((a, b) => (BigInt(a.seq) < BigInt(b.seq) ? -1 : 1));
    report.failed = report.failures[0] ?? null;
    if (!stop) report.vanished = Math.max(0, report.matched - read);
    report.skipped = Math.max(0, report.matched - report.vanished - report.replayed - report.failures.length);
    report.resume = resumeCommands(
      {
        ...(flags.since ? { since: flags.since } : {}),
        ...(flags.until ? { until: flags.until } : {}),
        ...(flags.subjectPrefix !== undefined ? { subjectPrefix: flags.subjectPrefix } : {}),
        ...(flags.key !== undefined ? { key: flags.key } : {}),
        keepGoing: Boolean(flags.keepGoing),
        lastSeq: report.lastSeq,
        failures: report.failures,
      },
      lastAttempted,
      maxAcked,
    );
  } finally {
    await nc.close();
  }
}
