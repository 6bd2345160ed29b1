import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { performance } from 'node:perf_hooks';
import { quoteIdentifier, validateSubject, WIRE_HEADERS, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/transport-node';
import { Command, Option } from 'commander';
import { commandPool, requireOutbox } from '../cli/database.js';
import { CLI_DEFAULTS } from '../cli/defaults.js';
import { validatorParser } from '../cli/flag-parsers.js';
import { connectNats, natsConnectOptions } from '../cli/nats-connection.js';
import { relayInstances } from '../cli/relay-instances.js';
import { addDatabaseOptions, addNatsOptions, type DatabaseFlags, type NatsFlags } from '../cli/shared-options.js';
import type { CommandContext } from '../context.js';
import { formatDuration, parseDuration } from '../duration.js';
import { CommandFailedError } from '../errors.js';
import { deleteUnpublishedSql } from '../sql/delete-unpublished.js';
import { publishLatencySql } from '../sql/publish-latency.js';

interface VerifyFlags extends DatabaseFlags, NatsFlags {
  subject: string;
  timeout: number;
  keepInStream?: boolean;
}

/** The `--json` output of `ferry verify`. */
export interface VerifyReport {
  ok: boolean;
  subject: string;
  stream: string | null;
  eventId: string | null;
  key: string;
  /** Position of the canary in the stream. */
  streamSeq: number | null;
  /** Outbox insert → row marked published after the PubAck, on the PostgreSQL clock. */
  commitToAckMs: number | null;
  /** COMMIT returned → the canary read back from the stream, on this machine's clock. */
  commitToConsumeMs: number | null;
  /** Live relay instances that may lease lanes: one below the schema's relay floor is not counted (see `relaysBelowFloor`). */
  relaysAlive: number;
  /** Live relay instances below the schema's relay floor: refused every lane lease, so they publish nothing. */
  relaysBelowFloor: number;
  cleanup: { consumerDeleted: boolean; streamMessageDeleted: boolean; outboxRow: 'kept-published' | 'deleted-unpublished' | 'none' };
  error: string | null;
}

const parseSubject = validatorParser((value) => validateSubject(value, '--subject'));

const HELP_AFTER = `
An end-to-end canary through your real infrastructure: commits a FerryCanary
event (key ferry-canary-<random>) with the publisher in a transaction, waits
for it in the stream through a temporary consumer, and reports the latencies.
A relay must be running for --schema. Afterwards the temporary consumer and the
canary's stream message are deleted (keep it with --keep-in-stream); the outbox
row stays, published, and is pruned with the others after the retention. Your
own consumers of the stream may see the canary: give --subject one they do not
filter on, inside a stream's subjects.

Exit codes:
  0  the canary went through
  1  it did not arrive within --timeout (the message says whether a relay is
     running), no stream covers --subject, or a server is unreachable
  2  bad usage

Examples:
  ferry verify --subject orders.ferry-canary
  ferry verify --subject ops.canary --timeout 30s --json`;

export function verifyCommand(ctx: CommandContext): Command {
  return addNatsOptions(
    addDatabaseOptions(
      new Command('verify').description('end-to-end canary: publish, relay, consume; report commit-to-ack and commit-to-consume latency'),
    ),
  )
    .addOption(
      new Option('--subject <subject>', 'subject of the canary (inside a stream)')
        .env('FERRY_CANARY_SUBJECT')
        .default(CLI_DEFAULTS.canarySubject)
        .argParser(parseSubject),
    )
    .addOption(
      new Option('--timeout <duration>', 'how long to wait for the canary (e.g. 10s, 1m)')
        .default(CLI_DEFAULTS.canaryTimeoutMs, formatDuration(CLI_DEFAULTS.canaryTimeoutMs))
        .argParser(parseDuration),
    )
    .addOption(new Option('--keep-in-stream', 'leave the canary message in the stream'))
    .addHelpText('after', HELP_AFTER)
    .action(async (flags: VerifyFlags) => {
      const report = await runVerify(flags, ctx);
      if (flags.json) ctx.out(JSON.stringify(report));
      else if (report.ok) {
        ctx.out(
          `canary ${report.eventId} went through stream ${report.stream} (seq ${report.streamSeq}): commit-to-ack ${report.commitToAckMs} ms, commit-to-consume ${report.commitToConsumeMs} ms`,
        );
        ctx.out(
          `cleanup: temporary consumer deleted; stream message ${report.cleanup.streamMessageDeleted ? 'deleted' : 'kept'}; the outbox row stays published and is pruned after the retention`,
        );
      }
      if (!report.ok) throw new CommandFailedError(report.error ?? 'the canary did not go through');
    });
}

/** What a failed canary says of relays below the floor: they beat, so they look alive, but send nothing. */
function belowFloorNote(n: number): string {
  if (n === 0) return '';
  return n === 1
    ? "; 1 relay instance below the schema's relay floor is refused every lane: stop it and run the current release (ferry status names it)"
    : `; ${n} relay instances below the schema's relay floor are refused every lane: stop them and run the current release (ferry status names them)`;
}

export async function runVerify(flags: VerifyFlags, ctx: CommandContext): Promise<VerifyReport> {
  const key = `ferry-canary-${randomBytes(6).toString('hex')}`;
  const report: VerifyReport = {
    ok: false,
    subject: flags.subject,
    stream: null,
    eventId: null,
    key,
    streamSeq: null,
    commitToAckMs: null,
    commitToConsumeMs: null,
    relaysAlive: 0,
    relaysBelowFloor: 0,
    cleanup: { consumerDeleted: false, streamMessageDeleted: false, outboxRow: 'none' },
    error: null,
  };
  // Options that cannot work (a creds file that does not parse, a seed that fails its checksum) are bad
  // usage, exit 2 like every other command, not a failed canary.
  natsConnectOptions(flags);
  const pool = commandPool(flags, ctx, 'ferry-verify');
  const schemaSql = quoteIdentifier(flags.schema);
  try {
    await requireOutbox(pool, flags.schema);
    // A relay below the floor beats but is refused every lane: it publishes nothing, so it is not alive here.
    const instances = await relayInstances(pool, flags.schema);
    report.relaysBelowFloor = instances.filter((i) => i.belowFloor).length;
    report.relaysAlive = instances.length - report.relaysBelowFloor;
    const nc = await connectNats(flags, 'ferry-verify');
    try {
      const jsm = await jetstreamManager(nc);
      try {
        report.stream = await jsm.streams.find(flags.subject);
      } catch {
        report.error = `no stream covers subject ${flags.subject}: pass --subject inside a stream's subjects (e.g. orders.ferry-canary), or add it to a stream`;
        return report;
      }
      const stream = report.stream;
      const name = `ferry_verify_${randomBytes(6).toString('hex')}`;
      await jsm.consumers.add(stream, {
        name,
        filter_subject: flags.subject,
        deliver_policy: DeliverPolicy.New,
        ack_policy: AckPolicy.None,
        inactive_threshold: nanos(60_000),
        mem_storage: true,
        num_replicas: 1,
      });
      try {
        const consumer = await jetstream(nc).consumers.get(stream, name);
        const publisher = createPublisher({ schema: flags.schema, source: `ferry-verify@${hostname()}`, notify: true });
        const published = await withTransaction(pool, (tx) =>
          publisher.publish(tx, { subject: flags.subject, key, type: 'FerryCanary', data: { canary: true, host: hostname() } }),
        );
        const committedAt = performance.now();
        report.eventId = published.id;
        const deadline = Date.now() + flags.timeout;
        while (Date.now() < deadline) {
          const m = await consumer.next({ expires: Math.max(1000, Math.min(5000, deadline - Date.now())) });
          if (m && m.headers?.get(WIRE_HEADERS.id) === published.id) {
            report.commitToConsumeMs = Math.round((performance.now() - committedAt) * 10) / 10;
            report.streamSeq = m.seq;
            break;
          }
        }
        if (report.streamSeq === null) {
          const removed = await pool.query(deleteUnpublishedSql(schemaSql), [published.id]);
          report.cleanup.outboxRow = removed.rowCount === 1 ? 'deleted-unpublished' : 'kept-published';
          const secs = `${Math.round(flags.timeout / 100) / 10}s`;
          report.error =
            report.relaysAlive === 0 && removed.rowCount === 1
              ? `the canary was not published within ${secs}: no relay is running for schema "${flags.schema}" (start ferry relay --schema ${flags.schema})${belowFloorNote(report.relaysBelowFloor)}; the canary row was removed`
              : removed.rowCount === 1
                ? `the canary was not published within ${secs} although ${report.relaysAlive} relays are alive: see ferry status and ferry doctor; the canary row was removed`
                : `the relay published the canary but it was not read back from stream ${stream} within ${secs}: see ferry doctor`;
          return report;
        }
        report.cleanup.outboxRow = 'kept-published';
        // The row is marked right after its PubAck: wait briefly for the mark, then read both times on one clock.
        const markDeadline = Date.now() + 5000;
        while (Date.now() < markDeadline) {
          const { rows } = await pool.query<{ ms: number | null }>(publishLatencySql(schemaSql), [published.id]);
          if (rows[0]?.ms !== null && rows[0]?.ms !== undefined) {
            report.commitToAckMs = Math.round(rows[0].ms * 10) / 10;
            break;
          }
          await new Promise((r) => setTimeout(r, 20));
        }
        if (!flags.keepInStream && report.streamSeq !== null) {
          report.cleanup.streamMessageDeleted = await jsm.streams.deleteMessage(stream, report.streamSeq, false).catch(() => false);
        }
        report.ok = true;
      } finally {
        report.cleanup.consumerDeleted = await jsm.consumers.delete(stream, name).catch(() => false);
      }
    } finally {
      await nc.close();
    }
  } catch (err) {
    report.error = (err as Error).message;
  } finally {
    await pool.end();
  }
  return report;
}
