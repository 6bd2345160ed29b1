import { ConfigError, encodeEvent, eventFromOutboxRow, type OutboxEventRow, quoteIdentifier } from '@ferry/core';
import { jetstream } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/transport-node';
import { Command, InvalidArgumentError, Option } from 'commander';
import { parseIntIn } from '../config.js';
import type { CommandContext } from '../context.js';
import { count } from '../count.js';
import { addDatabaseOptions, addNatsOptions, connectNats, type OpsNatsFlags, opsPool, requireOutbox } from '../ops-options.js';

interface ReplayFlags extends OpsNatsFlags {
  fromSeq?: bigint;
  toSeq?: bigint;
  since?: Date;
  until?: Date;
  key?: string;
  subjectPrefix?: string;
  maxInFlight: number;
  publishTimeoutMs: number;
  dryRun?: boolean;
  progress: 'auto' | 'bar' | 'lines' | 'none';
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
  /** The first publish that failed; nothing after it was sent. */
  failed: { seq: string; id: string; error: string } | null;
}

function parseSeq(value: string): bigint {
  if (!/^\d{1,19}$/.test(value.trim()))
    throw new InvalidArgumentError(`${JSON.stringify(value)} is not an outbox seq (a positive integer)`);
  return BigInt(value.trim());
}

function parseTime(value: string): Date {
  const d = new Date(value);
  if (Number.isNaN(d.getTime()) || !/^\d{4}-\d{2}-\d{2}/.test(value.trim())) {
    throw new InvalidArgumentError(`${JSON.stringify(value)} is not an ISO 8601 time: use e.g. 2026-11-29T21:00:00Z`);
  }
  return d;
}

const HELP_AFTER = `
Re-publishes retained (published, not discarded) outbox rows, in seq order, for
a consumer that lost its data. The filters combine (AND); give at least one.
--since/--until compare the row's insert time (created_at); --until is exclusive.

Each copy carries the original event id in ce-id but a new Nats-Msg-Id
(<event id>:replay:<run time>), so the stream stores it even inside its
duplicate window; consumers' inboxes drop the events they already applied.
Every consumer of the stream sees the copies: scope with --key/--subject-prefix.
Rows already pruned (older than the relay's --retention) cannot be replayed.

Exit codes:
  0  every selected event was replayed (or counted, with --dry-run)
  1  a publish failed (the report names the first seq not replayed), or a server is unreachable
  2  bad usage: no filter, an invalid value, --from-seq after --to-seq

Examples:
  ferry replay --from-seq 1000 --to-seq 2000
  ferry replay --since 2026-11-29T08:00:00Z --until 2026-11-29T09:00:00Z --subject-prefix orders.
  ferry replay --key order-42 --json`;

/** Progress on a terminal as a redrawn bar, otherwise one plain line per second. */
class Progress {
  readonly #mode: 'bar' | 'lines' | 'none';
  readonly #ctx: CommandContext;
  readonly #total: number;
  readonly #started = Date.now();
  #lastLine = 0;

  constructor(mode: ReplayFlags['progress'], total: number, ctx: CommandContext) {
    this.#mode = mode === 'auto' ? (process.stderr.isTTY ? 'bar' : 'lines') : mode;
    this.#total = total;
    this.#ctx = ctx;
  }

  update(done: number, final = false): void {
    if (this.#mode === 'none' || this.#total === 0) return;
    const now = Date.now();
    const pct = Math.floor((done / this.#total) * 100);
    const rate = Math.round(done / Math.max(0.001, (now - this.#started) / 1000));
    if (this.#mode === 'bar') {
      if (!final && now - this.#lastLine < 100) return; // redraw at most 10 times a second
      this.#lastLine = now;
      const width = 30;
      const filled = Math.round((done / this.#total) * width);
      process.stderr.write(`\r[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${pct}% ${done}/${this.#total} ${rate}/s`);
      if (final) process.stderr.write('\n');
      return;
    }
    if (final || now - this.#lastLine >= 1000) {
      this.#lastLine = now;
      this.#ctx.err(`replay: ${done}/${this.#total} (${pct}%) ${rate}/s`);
    }
  }
}

interface Row extends OutboxEventRow {
  seq: string;
}

export function replayCommand(ctx: CommandContext): Command {
  return addNatsOptions(
    addDatabaseOptions(new Command('replay').description('re-publish retained outbox events by seq range, time range or key')),
  )
    .addOption(new Option('--from-seq <seq>', 'first outbox seq (inclusive)').argParser(parseSeq))
    .addOption(new Option('--to-seq <seq>', 'last outbox seq (inclusive)').argParser(parseSeq))
    .addOption(new Option('--since <time>', 'rows inserted at or after this ISO time').argParser(parseTime))
    .addOption(new Option('--until <time>', 'rows inserted before this ISO time').argParser(parseTime))
    .addOption(new Option('--key <key>', 'only this event key'))
    .addOption(new Option('--subject-prefix <prefix>', 'only subjects starting with this text, e.g. orders.'))
    .addOption(
      new Option('--max-in-flight <n>', 'published, not yet acknowledged copies at most (1-10000)')
        .default(256)
        .argParser(parseIntIn(1, 10_000)),
    )
    .addOption(
      new Option('--publish-timeout-ms <ms>', 'how long to wait for one PubAck').default(10_000).argParser(parseIntIn(100, 600_000)),
    )
    .addOption(new Option('--dry-run', 'count the selected events and publish nothing'))
    .addOption(
      new Option('--progress <mode>', 'auto: a bar on a terminal, plain lines otherwise (on stderr)')
        .choices(['auto', 'bar', 'lines', 'none'])
        .default('auto'),
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

  const pool = opsPool(flags, ctx, 'ferry-replay');
  const started = Date.now();
  const stamp = new Date(started).toISOString();
  const report: ReplayReport = {
    matched: 0,
    replayed: 0,
    firstSeq: null,
    lastSeq: null,
    msgIdSuffix: `:replay:${stamp}`,
    durationMs: 0,
    dryRun: Boolean(flags.dryRun),
    failed: null,
  };
  try {
    await requireOutbox(pool, flags.schema);
    const s = quoteIdentifier(flags.schema);
    const counted = await pool.query<{ n: string; first: string | null; last: string | null }>(
      `SELECT count(*)::text AS n, min(seq)::text AS first, max(seq)::text AS last FROM ${s}.outbox WHERE ${where}`,
      values,
    );
    report.matched = Number(counted.rows[0]?.n ?? 0);
    report.firstSeq = counted.rows[0]?.first ?? null;
    report.lastSeq = counted.rows[0]?.last ?? null;
    if (!flags.dryRun && report.matched > 0) await publishAll(flags, ctx, pool, `${s}.outbox`, where, values, report);
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
  if (report.failed) {
    throw new Error(
      `replay stopped at seq ${report.failed.seq} (event ${report.failed.id}): ${report.failed.error}; fix it, then re-run with --from-seq ${report.failed.seq}`,
    );
  }
}

async function publishAll(
  flags: ReplayFlags,
  ctx: CommandContext,
  pool: import('pg').Pool,
  table: string,
  where: string,
  values: unknown[],
  report: ReplayReport,
): Promise<void> {
  const nc = await connectNats(flags, 'ferry-replay');
  const js = jetstream(nc, { timeout: flags.publishTimeoutMs });
  const progress = new Progress(flags.progress, report.matched, ctx);
  const inFlight = new Set<Promise<void>>();
  let failed: ReplayReport['failed'] = null;
  try {
    let cursor = '0';
    const page = 500;
    pages: while (failed === null) {
      const { rows } = await pool.query<Row>(
        `SELECT seq::text AS seq, id::text AS id, key, version::text AS version, subject, type, source, content_type, data, headers, occurred_at
           FROM ${table} o WHERE ${where} AND o.seq > $${values.length + 1}::bigint ORDER BY o.seq LIMIT ${page}`,
        [...values, cursor],
      );
      for (const row of rows) {
        if (failed !== null) break pages;
        while (inFlight.size >= flags.maxInFlight) await Promise.race(inFlight);
        if (failed !== null) break pages;
        const event = eventFromOutboxRow(row);
        const encoded = encodeEvent(event, { msgId: `${row.id}${report.msgIdSuffix}` });
        const h = natsHeaders();
        for (const [name, value] of encoded.headers) h.set(name, value);
        // Sent in seq order on one connection, so the copies reach the stream in seq order.
        const p = js.publish(encoded.subject, encoded.body, { headers: h }).then(
          () => {
            report.replayed++;
            progress.update(report.replayed);
          },
          (err: Error) => {
            if (failed === null || BigInt(row.seq) < BigInt(failed.seq)) failed = { seq: row.seq, id: row.id, error: err.message };
          },
        );
        const tracked = p.finally(() => inFlight.delete(tracked));
        inFlight.add(tracked);
      }
      if (rows.length < page) break;
      cursor = rows.at(-1)?.seq ?? cursor;
    }
    await Promise.all(inFlight);
    progress.update(report.replayed, true);
    report.failed = failed;
  } finally {
    await nc.close();
  }
}
