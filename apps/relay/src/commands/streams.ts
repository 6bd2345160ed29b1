import { describeValue, isNatsName } from '@ferry/core';
import { JetStreamApiCodes, JetStreamApiError, type JetStreamManager, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { Argument, Command, InvalidArgumentError, Option } from 'commander';
import {
  applyStreamPlan,
  checkStreamSpec,
  defaultDuplicateWindowMs,
  describePlan,
  planChanges,
  planStream,
  type StreamPlan,
  type StreamSpec,
} from '../actions/streams.js';
import { CLI_DEFAULTS } from '../cli/defaults.js';
import { validatorParser } from '../cli/flag-parsers.js';
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

async function withJetStream<T>(flags: NatsFlags, run: (jsm: JetStreamManager) => Promise<T>): Promise<T> {
  let nc: NatsConnection | undefined;
  try {
    nc = await connectNats(flags, 'ferry-streams');
    return await run(await jetstreamManager(nc, { timeout: CLI_DEFAULTS.connectTimeoutMs }));
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
  ferry streams ensure ORDERS --duplicate-window 30m    # raise an existing stream's window`;

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
    .addOption(new Option('--dry-run', 'print what would change, and change nothing'))
    .addOption(new Option('--json', 'print the result as JSON'))
    .addHelpText('after', ENSURE_HELP)
    .action(async (specs: StreamSpec[], flags: StreamsFlags & { duplicateWindow?: number; dryRun?: boolean }) => {
      const byName = new Map<string, string[]>();
      for (const s of specs) byName.set(s.name, [...(byName.get(s.name) ?? []), ...s.subjects]);
      const windows = { createWindowMs: flags.duplicateWindow ?? defaultDuplicateWindowMs(), raiseWindowMs: flags.duplicateWindow };
      const results = await withJetStream(flags, async (jsm) => {
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
Deletes the stream and every message and consumer in it; this cannot be undone. Asks first on a
terminal; without one, it needs --yes (exit 2 otherwise). The question names what is lost. Events
the relay sends to the stream's subjects afterwards back off (no stream binds them) until a
stream binds them again: \`ferry streams ensure NAME=SUBJECTS\`.

Example:
  ferry streams rm ORDERS --yes`;

function rmCommand(ctx: CommandContext): Command {
  return addNatsOptions(
    new Command('rm').description('delete a stream, its messages and its consumers (asks first)').addArgument(
      new Argument('<NAME>', 'the stream').argParser((value: string) => {
        if (!isNatsName(value)) throw new InvalidArgumentError(`${describeValue(value, 40)} is not a stream name`);
        return value;
      }),
    ),
  )
    .addOption(new Option('--yes', 'do not ask for confirmation'))
    .addOption(new Option('--json', 'print the result as JSON'))
    .addHelpText('after', RM_HELP)
    .action(async (name: string, flags: StreamsFlags & { yes?: boolean }) => {
      const removed = await withJetStream(flags, async (jsm) => {
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
        return { messages: info.state.messages, consumers: info.state.consumer_count, subjects: info.config.subjects ?? [] };
      });
      if (!removed) {
        ctx.err(`ferry: no stream named ${name}: nothing deleted (ferry streams ls lists them)`);
        exitWith(EXIT.failure);
      }
      if (flags.json) ctx.out(JSON.stringify({ stream: name, deleted: true, ...removed }));
      else ctx.out(`deleted stream ${name} (${count(removed.messages, 'message')}, ${count(removed.consumers, 'consumer')})`);
    });
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
