import { ConfigError, describeValue, isNatsName } from '@ferry/core';
import { JetStreamApiCodes, JetStreamApiError, type JetStreamManager, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { Argument, Command, InvalidArgumentError, Option } from 'commander';
import {
  applyStreamPlan,
  checkStreamSpec,
  describePlan,
  planChanges,
  planStream,
  type StreamPlan,
  type StreamSpec,
} from '../actions/streams.js';
import { CLI_DEFAULTS } from '../cli/defaults.js';
import { parseIntIn, validatorParser } from '../cli/flag-parsers.js';
import { connectNats } from '../cli/nats-connection.js';
import { addNatsOptions, type NatsFlags } from '../cli/shared-options.js';
import { confirm } from '../confirm.js';
import type { CommandContext } from '../context.js';
import { count } from '../count.js';
import { formatDuration, parseDuration } from '../duration.js';
import { NotConfirmedError } from '../errors.js';
import { EXIT, exitWith } from '../exit-codes.js';

// `ferry streams`: the JetStream streams the outbox's subjects go to, managed with Ferry's own
// commands, so that no fix Ferry prints needs the `nats` CLI.

interface StreamsFlags extends NatsFlags {
  json?: boolean;
}

async function withJetStream<T>(flags: NatsFlags, run: (jsm: JetStreamManager, nc: NatsConnection) => Promise<T>): Promise<T> {
  let nc: NatsConnection | undefined;
  try {
    nc = await connectNats(flags, 'ferry-streams');
    return await run(await jetstreamManager(nc, { timeout: CLI_DEFAULTS.connectTimeoutMs }), nc);
  } finally {
    await nc?.close().catch(() => {});
  }
}

function planJson(plan: StreamPlan, applied: boolean) {
  return {
    stream: plan.name,
    exists: plan.info !== undefined,
    changes: planChanges(plan),
    applied,
    add: plan.add,
    alreadyBound: plan.covered,
    subjects: [...(plan.info?.config.subjects ?? []), ...plan.add],
    ...(plan.windowMs ? { duplicateWindowMs: plan.windowMs } : {}),
    text: describePlan(plan, applied),
  };
}

const ENSURE_HELP = `
Creates each stream that does not exist (file storage, duplicate window --duplicate-window or
the relay's retry span at its defaults plus one PubAck wait, at least 2m), or adds to an existing
one the subjects it lacks. It never removes a subject and never lowers a window: other producers
may rely on them. The same as \`ferry relay --ensure-stream\`, without starting a relay.

A subject another stream binds is refused, naming that stream (exit 2); nothing is changed.
Changes nothing with --dry-run. Needs the JetStream API permissions STREAM.INFO, STREAM.CREATE and
STREAM.UPDATE (docs/security.md).

Examples:
  ferry streams ensure ORDERS='orders.>'
  ferry streams ensure ORDERS=orders.created,orders.paid PAYMENTS='payments.>' --dry-run
  ferry streams ensure ORDERS --duplicate-window 30m    # raise an existing stream's window
  ferry streams ensure ORDERS --replicas 3              # on a cluster: 3 copies of every message`;

function ensureCommand(ctx: CommandContext): Command {
  return addNatsOptions(
    new Command('ensure')
      .description('create a stream or add the subjects it lacks (never removes any)')
      .addArgument(
        new Argument('<NAME=SUBJECTS...>', 'a stream and its subjects, comma-separated; a bare NAME for its window alone').argParser(
          (value: string, previous: StreamSpec[] = []) => [...previous, validatorParser(checkStreamSpec)(value)],
        ),
      ),
  )
    .addOption(
      new Option(
        '--duplicate-window <duration>',
        `the window a created stream gets, and the least an existing one is raised to (never lowered); e.g. 30m`,
      ).argParser((value: string) => {
        const ms = parseDuration(value);
        if (ms < 1000)
          throw new InvalidArgumentError(`${describeValue(value, 20)} is too short a duplicate window: use 1s or more, e.g. 2m`);
        return ms;
      }),
    )
    .addOption(
      new Option(
        '--replicas <n>',
        'the replicas a created stream gets, and the least an existing one is raised to (never lowered; 1-5)',
      ).argParser(parseIntIn(1, 5)),
    )
    .addOption(new Option('--dry-run', 'print what would change, and change nothing'))
    .addOption(new Option('--json', 'print the result as JSON'))
    .addHelpText('after', ENSURE_HELP)
    .action(async (specs: StreamSpec[], flags: StreamsFlags & { duplicateWindow?: number; replicas?: number; dryRun?: boolean }) => {
      const byName = new Map<string, string[]>();
      for (const s of specs) byName.set(s.name, [...(byName.get(s.name) ?? []), ...s.subjects]);
      const windows = {
        createWindowMs: flags.duplicateWindow,
        raiseWindowMs: flags.duplicateWindow,
        replicas: flags.replicas,
      };
      const results = await withJetStream(flags, async (jsm, nc) => {
        // A lone nats-server 2.9 takes num_replicas 3 in an update and keeps one copy: refuse it here.
        if ((flags.replicas ?? 1) > 1 && !nc.info?.cluster) {
          throw new ConfigError(
            '--replicas',
            `--replicas ${flags.replicas}: the NATS server at ${nc.getServer()} is not in a cluster, so it keeps one copy whatever the stream says; run a 3-node cluster (docs/nats-cluster.md), or leave --replicas out`,
          );
        }
        const out: ReturnType<typeof planJson>[] = [];
        // Every plan first: a bare name of a missing stream fails before anything changes.
        const plans: StreamPlan[] = [];
        for (const [name, subjects] of byName) plans.push(await planStream(jsm, { name, subjects }, windows));
        for (const plan of plans) {
          if (!flags.dryRun) await applyStreamPlan(jsm, plan);
          out.push(planJson(plan, !flags.dryRun && planChanges(plan)));
        }
        return out;
      });
      if (flags.json) ctx.out(JSON.stringify({ dryRun: flags.dryRun === true, streams: results }));
      else for (const r of results) ctx.out(r.text);
    });
}

function isNotFound(err: unknown): boolean {
  return err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound;
}

const RM_HELP = `
Deletes the stream and every message and consumer in it; this cannot be undone. With --consumer C,
deletes only that durable consumer (an inbox with manageConsumer creates it again at its start, from
the stream's first message: its inbox drops what it applied already). Asks first on a terminal;
without one, it needs --yes (exit 2 otherwise). The question names what is lost. Events the relay
sends to a deleted stream's subjects afterwards back off (no stream binds them) until a stream binds
them again: \`ferry streams ensure NAME=SUBJECTS\`. Exit 1 when there is no such stream or consumer.

Examples:
  ferry streams rm ORDERS --yes
  ferry streams rm ORDERS --consumer billing`;

function rmCommand(ctx: CommandContext): Command {
  return addNatsOptions(
    new Command('rm')
      .description('delete a stream (its messages and consumers), or one consumer of it (asks first)')
      .addArgument(new Argument('<NAME>', 'the stream').argParser(natsName('stream'))),
  )
    .addOption(new Option('--consumer <name>', 'delete only this durable consumer of the stream').argParser(natsName('consumer')))
    .addOption(new Option('--yes', 'do not ask for confirmation'))
    .addOption(new Option('--json', 'print the result as JSON'))
    .addHelpText('after', RM_HELP)
    .action(async (name: string, flags: StreamsFlags & { yes?: boolean; consumer?: string }) => {
      const removed = await withJetStream<Removed | undefined>(flags, (jsm) =>
        flags.consumer === undefined ? removeStream(jsm, name, flags) : removeConsumer(jsm, name, flags.consumer, flags),
      );
      if (!removed) {
        ctx.err(
          flags.consumer === undefined
            ? `ferry: no stream named ${name}: nothing deleted (ferry streams ls lists them)`
            : `ferry: stream ${name} has no consumer named ${flags.consumer}: nothing deleted`,
        );
        exitWith(EXIT.failure);
      }
      if (flags.json)
        ctx.out(
          JSON.stringify({
            stream: name,
            ...(flags.consumer !== undefined ? { consumer: flags.consumer } : {}),
            deleted: true,
            ...removed,
          }),
        );
      else ctx.out(`deleted ${removed.what}`);
    });
}

/** A stream or consumer name as JetStream takes it: 1-255 characters, no whitespace, '.', '*', '>', '/' or '\\'. */
function natsName(what: string): (value: string) => string {
  return (value) => {
    if (!isNatsName(value)) throw new InvalidArgumentError(`${describeValue(value, 40)} is not a ${what} name`);
    return value;
  };
}

/** What `rm` deleted: in words, and its counts for --json. */
type Removed = { what: string } & Record<string, unknown>;

async function removeStream(jsm: JetStreamManager, name: string, flags: { yes?: boolean }) {
  let info: Awaited<ReturnType<JetStreamManager['streams']['info']>>;
  try {
    info = await jsm.streams.info(name);
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
  const what = `${count(info.state.messages, 'message')}, ${count(info.state.consumer_count, 'consumer')}, subjects ${(info.config.subjects ?? []).join(', ') || '(none)'}`;
  if (!flags.yes && !(await confirm(`delete stream ${name} (${what}); this cannot be undone`))) throw new NotConfirmedError();
  await jsm.streams.delete(name);
  return {
    what: `stream ${name} (${count(info.state.messages, 'message')}, ${count(info.state.consumer_count, 'consumer')})`,
    messages: info.state.messages,
    consumers: info.state.consumer_count,
    subjects: info.config.subjects ?? [],
  };
}

async function removeConsumer(jsm: JetStreamManager, stream: string, consumer: string, flags: { yes?: boolean }) {
  let info: Awaited<ReturnType<JetStreamManager['consumers']['info']>>;
  try {
    info = await jsm.consumers.info(stream, consumer);
  } catch (err) {
    if (
      err instanceof JetStreamApiError &&
      (err.code === JetStreamApiCodes.ConsumerNotFound || err.code === JetStreamApiCodes.StreamNotFound)
    )
      return undefined;
    throw err;
  }
  const what = `${count(info.num_pending, 'message')} not yet delivered, ${info.num_ack_pending} awaiting an ack`;
  if (!flags.yes && !(await confirm(`delete consumer ${consumer} of stream ${stream} (${what})`))) throw new NotConfirmedError();
  await jsm.consumers.delete(stream, consumer);
  return { what: `consumer ${consumer} of stream ${stream}`, pending: info.num_pending, ackPending: info.num_ack_pending };
}

function lsCommand(ctx: CommandContext): Command {
  return addNatsOptions(new Command('ls').description('list the streams: subjects, messages, consumers, duplicate window'))
    .addOption(new Option('--json', 'print the result as JSON'))
    .action(async (flags: StreamsFlags) => {
      const rows = await withJetStream(flags, async (jsm) => {
        const out: Array<{ stream: string; subjects: string[]; messages: number; consumers: number; duplicateWindowMs: number }> = [];
        for await (const s of jsm.streams.list()) {
          out.push({
            stream: s.config.name,
            subjects: s.config.subjects ?? [],
            messages: s.state.messages,
            consumers: s.state.consumer_count,
            duplicateWindowMs: Math.round(s.config.duplicate_window / 1e6),
          });
        }
        return out.sort((a, b) => a.stream.localeCompare(b.stream));
      });
      if (flags.json) ctx.out(JSON.stringify({ streams: rows }));
      else if (rows.length === 0) ctx.out('no streams (ferry streams ensure NAME=SUBJECTS creates one)');
      else {
        for (const r of rows) {
          ctx.out(
            `${r.stream}  subjects ${r.subjects.join(', ') || '(none)'}  ${count(r.messages, 'message')}  ${count(r.consumers, 'consumer')}  duplicate window ${formatDuration(r.duplicateWindowMs)}`,
          );
        }
      }
    });
}

export function streamsCommand(ctx: CommandContext): Command {
  const cmd = new Command('streams').description("manage the JetStream streams the outbox's subjects go to (no nats CLI needed)");
  for (const sub of [ensureCommand(ctx), rmCommand(ctx), lsCommand(ctx)]) {
    cmd.addCommand(sub.exitOverride().configureOutput({ writeOut: (s) => ctx.out(s.trimEnd()), writeErr: (s) => ctx.err(s.trimEnd()) }));
  }
  return cmd;
}
