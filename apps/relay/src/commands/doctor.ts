// ferry doctor: one file because every check shares the findings collector and the flags; past ~400
// lines, the NATS checks (checkNats, checkConsumer) are the part to move out first.
import {
  describeValue,
  encodedSize,
  encodeEvent,
  eventFromOutboxRow,
  foreignTables,
  isNatsName,
  migrationStatus,
  type OutboxEventRow,
  quoteIdentifier,
} from '@ferry/core';
import { consumerConfigDifferences } from '@ferry/inbox';
import { type JetStreamManager, jetstreamManager, type StreamInfo } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { Command, InvalidArgumentError, Option } from 'commander';
import type pg from 'pg';
import { commandPool } from '../cli/database.js';
import { CLI_DEFAULTS } from '../cli/defaults.js';
import { parseIntIn } from '../cli/flag-parsers.js';
import { connectNats } from '../cli/nats-connection.js';
import { relayInstances } from '../cli/relay-instances.js';
import {
  addDatabaseOptions,
  addNatsOptions,
  addRetrySpanOptions,
  type DatabaseFlags,
  type NatsFlags,
  type RetrySpanFlags,
} from '../cli/shared-options.js';
import type { CommandContext } from '../context.js';
import { count } from '../count.js';
import { duplicateWindowShortfall } from '../duplicate-window.js';
import { formatDuration } from '../duration.js';
import { exitWith } from '../exit-codes.js';
import { retrySpanMs } from '../relay-options.js';
import { countDeadSql } from '../sql/count-dead.js';
import { largestEventSql } from '../sql/largest-event.js';
import { outboxSubjectsSql } from '../sql/outbox-subjects.js';
import { SERVER_SETTINGS_SQL } from '../sql/server-settings.js';

interface DoctorFlags extends DatabaseFlags, NatsFlags, RetrySpanFlags {
  stream?: string[];
  consumer?: string[];
  maxPayloadBytes: number;
  inboxMaxDeliver: number;
}

export const FINDING_STATUSES = ['ok', 'warning', 'problem', 'skipped'] as const;
export type FindingStatus = (typeof FINDING_STATUSES)[number];

/** One check's result; a `problem` counts towards the exit code, a `warning` does not. */
export interface Finding {
  check: string;
  status: FindingStatus;
  message: string;
  /** What to do about it (present for warnings and problems). */
  fix?: string;
}

/** The `--json` output of `ferry doctor`. */
export interface DoctorReport {
  problems: number;
  warnings: number;
  findings: Finding[];
}

const HELP_AFTER = `
Checks, each printed with its fix:
  postgres       reachable; idle_in_transaction_session_timeout set
  migrations     the outbox schema is at this Ferry's version
  relays         live relay instances; dead events waiting
  nats           reachable, JetStream enabled
  subjects       every distinct subject in the outbox is in a stream (scans the outbox)
  stream NAME    exists (--stream), duplicate window >= the relay's retry span,
                 replicas and storage
  max_payload    the server's max_payload >= --max-payload-bytes and the largest event
  consumer NAME  (--consumer, repeatable) an inbox consumer: pull, explicit ack,
                 max_deliver unlimited (or above the inbox's maxDeliver), ack_wait

Pass the relay's own --max-attempts/--backoff-base-ms/--backoff-max-ms/
--publish-timeout-ms/--poll-interval-ms (or the same FERRY_* variables) so the
retry span is the one your relays use: before each re-send, a PubAck timeout,
the backoff cap and a poll interval (about 22 minutes with the defaults).

Exit codes:
  0  no problem (warnings do not count)
  N  N problems were found (at most 100)
  2  bad usage

Examples:
  ferry doctor
  ferry doctor --stream ORDERS --consumer billing --json`;

export function doctorCommand(ctx: CommandContext): Command {
  return addRetrySpanOptions(
    addNatsOptions(
      addDatabaseOptions(
        new Command('doctor').description('check the database, NATS, streams and consumers; print each finding with its fix'),
      ),
    ),
  )
    .addOption(new Option('--stream <name>', 'also check this stream (repeatable)').argParser(collect))
    .addOption(new Option('--consumer <name>', 'check this inbox consumer on the stream(s) (repeatable)').argParser(collect))
    .addOption(
      new Option('--max-payload-bytes <n>', "the publisher's maxPayloadBytes")
        .default(CLI_DEFAULTS.maxPayloadBytes)
        .argParser(parseIntIn(1, 64 * 1024 * 1024)),
    )
    .addOption(
      new Option('--inbox-max-deliver <n>', "the inbox's maxDeliver (attempts before parking)")
        .default(CLI_DEFAULTS.inboxMaxDeliver)
        .argParser(parseIntIn(1, 10_000)),
    )
    .addHelpText('after', HELP_AFTER)
    .action(async (flags: DoctorFlags) => {
      const report = await runDoctor(flags, ctx);
      if (flags.json) ctx.out(JSON.stringify(report));
      else {
        const tag = { ok: 'ok     ', warning: 'WARN   ', problem: 'PROBLEM', skipped: 'skipped' } as const;
        for (const f of report.findings) {
          ctx.out(`${tag[f.status]}  ${f.check}: ${f.message}`);
          if (f.fix) ctx.out(`         fix: ${f.fix}`);
        }
        ctx.out(`${count(report.problems, 'problem')}, ${count(report.warnings, 'warning')}`);
      }
      if (report.problems > 0) exitWith(Math.min(100, report.problems));
    });
}

/** A JetStream stream or consumer name (no whitespace, `.`, `*`, `>` or path separators), collected. */
function collect(value: string, previous: string[] = []): string[] {
  if (!isNatsName(value)) {
    throw new InvalidArgumentError(
      `${describeValue(value, 40)} is not a JetStream name: 1-255 characters, no whitespace, '.', '*', '>', '/' or '\\'`,
    );
  }
  return [...previous, value];
}

const fmtMs = (ms: number) => formatDuration(ms, true);

export async function runDoctor(flags: DoctorFlags, ctx: CommandContext): Promise<DoctorReport> {
  const findings: Finding[] = [];
  const add = (check: string, status: FindingStatus, message: string, fix?: string) =>
    findings.push({ check, status, message, ...(fix ? { fix } : {}) });
  const pool = commandPool(flags, ctx, 'ferry-doctor');
  let nc: NatsConnection | undefined;
  try {
    const subjects = await checkDatabase(pool, flags, add);
    try {
      nc = await connectNats(flags, 'ferry-doctor');
      add(
        'nats',
        'ok',
        `reachable at ${nc.getServer()} (nats-server ${nc.info?.version ?? '?'}, max_payload ${nc.info?.max_payload ?? '?'})`,
      );
    } catch (err) {
      add('nats', 'problem', (err as Error).message, 'start NATS with JetStream (nats-server -js), or pass --nats-url / FERRY_NATS_URL');
    }
    if (nc) await checkNats(nc, pool, subjects, flags, add);
  } finally {
    await pool.end().catch(() => {});
    await nc?.close().catch(() => {});
  }
  return {
    problems: findings.filter((f) => f.status === 'problem').length,
    warnings: findings.filter((f) => f.status === 'warning').length,
    findings,
  };
}

type Add = (check: string, status: FindingStatus, message: string, fix?: string) => void;

/** Returns the outbox's distinct subjects with their counts, or undefined when they cannot be read. */
async function checkDatabase(pool: pg.Pool, flags: DoctorFlags, add: Add): Promise<Map<string, number> | undefined> {
  const schema = flags.schema;
  try {
    const { rows } = await pool.query<{ v: string; idle: string }>(SERVER_SETTINGS_SQL);
    add('postgres', 'ok', `reachable (PostgreSQL ${rows[0]?.v})`);
    if (rows[0]?.idle === '0') {
      add(
        'postgres',
        'warning',
        'idle_in_transaction_session_timeout is 0: a session left idle in a transaction holds back vacuum of the outbox and its row locks forever',
        "ALTER DATABASE <db> SET idle_in_transaction_session_timeout = '60s' (or per role)",
      );
    }
  } catch (err) {
    add(
      'postgres',
      'problem',
      `not reachable: ${(err as Error).message}`,
      'check --database-url / FERRY_DATABASE_URL, the network and the credentials',
    );
    add('migrations', 'skipped', 'PostgreSQL is not reachable');
    return undefined;
  }
  const foreign = await foreignTables(pool, schema);
  if (foreign.length > 0) {
    add(
      'migrations',
      'problem',
      `schema "${schema}" holds tables Ferry did not create (${foreign.join(', ')})`,
      'give Ferry a schema of its own with --schema (e.g. ferry); Ferry leaves those tables alone',
    );
    return undefined;
  }
  const status = await migrationStatus(pool, { schema, set: 'outbox' });
  if (status.current === 0) {
    add('migrations', 'problem', `schema "${schema}" has no outbox tables`, `ferry migrate --schema ${schema}`);
    return undefined;
  }
  if (status.current < status.latest) {
    add(
      'migrations',
      'problem',
      `outbox schema "${schema}" is at version ${status.current}, this Ferry needs ${status.latest}`,
      `ferry migrate --schema ${schema}`,
    );
  } else if (status.current > status.latest) {
    add(
      'migrations',
      'problem',
      `outbox schema "${schema}" is at version ${status.current}, newer than this Ferry (${status.latest})`,
      'upgrade this ferry CLI to the version the relays run',
    );
  } else add('migrations', 'ok', `outbox schema "${schema}" is current (version ${status.current})`);
  const schemaSql = quoteIdentifier(schema);
  const [instances, dead] = await Promise.all([relayInstances(pool, schema), pool.query<{ n: string }>(countDeadSql(schemaSql, 'all'))]);
  if (instances.length === 0)
    add('relays', 'warning', `no relay instance is running for schema "${schema}"`, `ferry relay --schema ${schema}`);
  else add('relays', 'ok', `${count(instances.length, 'relay instance')} alive (${instances.map((i) => i.instance).join(', ')})`);
  const deadCount = Number(dead.rows[0]?.n ?? 0);
  if (deadCount > 0)
    add('relays', 'warning', `${deadCount} dead events block their keys`, 'ferry dlq list, then ferry dlq retry or discard');
  const subjects = await pool.query<{ subject: string; n: string }>(outboxSubjectsSql(schemaSql));
  return new Map(subjects.rows.map((r) => [r.subject, Number(r.n)]));
}

async function checkNats(
  nc: NatsConnection,
  pool: pg.Pool,
  subjects: Map<string, number> | undefined,
  flags: DoctorFlags,
  add: Add,
): Promise<void> {
  let jsm: JetStreamManager;
  try {
    jsm = await jetstreamManager(nc, { timeout: 5000 });
    await jsm.getAccountInfo();
  } catch (err) {
    add(
      'nats',
      'problem',
      `JetStream is not available: ${(err as Error).message}`,
      'enable JetStream on the server (nats-server -js, or jetstream {} in its config)',
    );
    return;
  }
  const streams = new Set<string>(flags.stream ?? []);
  if (subjects === undefined) add('subjects', 'skipped', 'the outbox could not be read');
  else if (subjects.size === 0) add('subjects', 'ok', 'the outbox holds no events yet');
  else {
    const missing: string[] = [];
    for (const [subject, n] of subjects) {
      try {
        streams.add(await jsm.streams.find(subject));
      } catch {
        missing.push(`${subject} (${count(n, 'event')})`);
      }
    }
    if (missing.length > 0) {
      add(
        'subjects',
        'problem',
        `${missing.length} outbox subjects are in no stream: ${missing.slice(0, 5).join(', ')}${missing.length > 5 ? ', …' : ''}`,
        'add them to a stream: nats stream edit <STREAM> --subjects …, or ferry relay --ensure-stream NAME=<subject>.>',
      );
    } else add('subjects', 'ok', `all ${subjects.size} outbox subjects are in a stream (${[...streams].join(', ')})`);
  }
  const span = retrySpanMs(flags);
  for (const name of streams) {
    let info: StreamInfo;
    try {
      info = await jsm.streams.info(name);
    } catch (err) {
      add(
        `stream ${name}`,
        'problem',
        `does not exist or cannot be read: ${(err as Error).message}`,
        `create it: nats stream add ${name} --subjects '…', or ferry relay --ensure-stream ${name}=<subjects>`,
      );
      continue;
    }
    const short = duplicateWindowShortfall(name, info.config.duplicate_window, flags);
    if (short) add(`stream ${name}`, 'problem', short.message, short.fix);
    else {
      const windowMs = Math.round(info.config.duplicate_window / 1e6);
      add(`stream ${name}`, 'ok', `duplicate window ${fmtMs(windowMs)} covers the retry span ${fmtMs(span)}`);
    }
    if (info.config.num_replicas < 3) {
      add(
        `stream ${name}`,
        'warning',
        `${info.config.num_replicas} replica(s), ${info.config.storage} storage: a lost server loses acknowledged events`,
        `in production use a 3-node cluster: nats stream edit ${name} --replicas 3 (file storage)`,
      );
    }
    for (const consumer of flags.consumer ?? []) await checkConsumer(jsm, name, consumer, flags, add);
  }
  if ((flags.consumer ?? []).length > 0 && streams.size === 0) {
    add('consumer', 'skipped', 'no stream to look in', 'pass --stream NAME');
  }
  await checkPayload(nc, pool, subjects !== undefined, flags, add);
}

async function checkConsumer(jsm: JetStreamManager, stream: string, name: string, flags: DoctorFlags, add: Add): Promise<void> {
  const check = `consumer ${stream}/${name}`;
  let c: Awaited<ReturnType<JetStreamManager['consumers']['info']>>;
  try {
    c = await jsm.consumers.info(stream, name);
  } catch (err) {
    add(
      check,
      'problem',
      `not found: ${(err as Error).message}`,
      'start the inbox once (createInbox creates its durable consumer), or check --stream and --consumer',
    );
    return;
  }
  const cfg = c.config;
  // The inbox's own check (what createInbox refuses), for what doctor knows of the inbox: its maxDeliver.
  const bad = consumerConfigDifferences(cfg, { maxDeliver: flags.inboxMaxDeliver });
  const ackWaitMs = Math.round((cfg.ack_wait ?? 0) / 1e6);
  const summary = `ack_wait ${fmtMs(ackWaitMs)}, max_deliver ${cfg.max_deliver ?? -1}, max_ack_pending ${cfg.max_ack_pending ?? '?'}, filter ${cfg.filter_subject ?? '(all)'}, pending ${c.num_pending}, unacknowledged ${c.num_ack_pending}, redelivered ${c.num_redelivered}`;
  if (bad.length > 0) {
    add(
      check,
      'problem',
      `${bad.join('; ')} (${summary})`,
      'delete the consumer and let the inbox create it (manageConsumer: true), or fix it with nats consumer edit',
    );
    return;
  }
  add(check, 'ok', summary);
  if (cfg.max_deliver !== undefined && cfg.max_deliver !== -1) {
    add(
      check,
      'warning',
      `max_deliver ${cfg.max_deliver}: a message whose parking failed (database down) is dropped after that many deliveries`,
      'set max_deliver to -1 and let the inbox park',
    );
  }
  if (ackWaitMs < 5000) {
    add(
      check,
      'warning',
      `ack_wait ${fmtMs(ackWaitMs)} is short: a slow handler's message is redelivered while it still runs`,
      'raise the inbox ackWaitMs above your slowest handler',
    );
  }
}

async function checkPayload(nc: NatsConnection, pool: pg.Pool, outboxReadable: boolean, flags: DoctorFlags, add: Add): Promise<void> {
  const max = nc.info?.max_payload;
  if (max === undefined) {
    add('max_payload', 'skipped', 'the server did not report max_payload');
    return;
  }
  if (flags.maxPayloadBytes > max) {
    add(
      'max_payload',
      'problem',
      `the publisher's maxPayloadBytes ${flags.maxPayloadBytes} is above the server's max_payload ${max}: an event can commit and then never be publishable`,
      `createPublisher({ maxPayloadBytes: ${max} }) or raise max_payload in the nats-server config`,
    );
  } else add('max_payload', 'ok', `maxPayloadBytes ${flags.maxPayloadBytes} <= the server's max_payload ${max}`);
  if (!outboxReadable) return;
  const { rows } = await pool.query<OutboxEventRow>(largestEventSql(quoteIdentifier(flags.schema)));
  const row = rows[0];
  if (!row) return;
  const size = encodedSize(encodeEvent(eventFromOutboxRow(row)));
  if (size > max) {
    add(
      'max_payload',
      'problem',
      `event ${row.id} encodes to ${size} bytes, over the server's max_payload ${max}: it dies in the relay`,
      'raise max_payload in the nats-server config, then ferry dlq retry it; or ferry dlq discard it',
    );
  } else add('max_payload', 'ok', `the largest retained event encodes to ${size} bytes`);
}
