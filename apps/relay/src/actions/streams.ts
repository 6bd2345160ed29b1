import { ConfigError, describeValue, isNatsName, reservedSubjectToken } from '@ferry/core';
import { JetStreamApiCodes, JetStreamApiError, type JetStreamManager, StorageType, type StreamInfo } from '@nats-io/jetstream';
import { formatDuration } from '../duration.js';
import { RELAY_DEFAULTS, retrySpanMs } from '../relay-options.js';
import { streamsBinding } from './subject-streams.js';

/**
 * Whether the subject filter `pattern` covers every subject `subject` can be
 * (NATS wildcards: `*` one token, `>` one or more trailing tokens). A subject
 * already covered by a stream's own subjects is not added again: JetStream
 * refuses a stream whose subjects overlap each other.
 */
export function subjectCovers(pattern: string, subject: string): boolean {
  const p = pattern.split('.');
  const s = subject.split('.');
  for (let i = 0; i < p.length; i++) {
    if (p[i] === '>') return s.length > i;
    if (i >= s.length) return false;
    if (p[i] === '*') {
      if (s[i] === '>') return false;
    } else if (p[i] !== s[i]) return false;
  }
  return p.length === s.length;
}

/**
 * The duplicate window a stream Ferry creates gets: the relay's retry span at
 * its defaults plus one more PubAck wait, and never under two minutes
 * (JetStream's own default), rounded up to a whole minute so that it reads as
 * one. `ferry relay --ensure-stream` computes it from its own flags; `ferry
 * streams ensure` and the console from the defaults.
 */
export function defaultDuplicateWindowMs(
  spanMs: number = retrySpanMs(RELAY_DEFAULTS),
  publishTimeoutMs: number = RELAY_DEFAULTS.publishTimeoutMs,
): number {
  return Math.max(120_000, Math.ceil((spanMs + publishTimeoutMs) / 60_000) * 60_000);
}

/** One `NAME=SUBJECT[,SUBJECT]` (or a bare `NAME`: an existing stream, for its window alone). */
export interface StreamSpec {
  name: string;
  subjects: readonly string[];
}

/**
 * `NAME=SUBJECT[,SUBJECT]` or a bare `NAME`, checked before NATS is asked (the CLI's argument, the
 * console's form): each subject a NATS subject filter that NATS does not reserve.
 */
export function checkStreamSpec(value: string): StreamSpec {
  const m = /^([^=]*)(?:=(.*))?$/s.exec(value.trim()) as RegExpExecArray;
  const name = m[1] as string;
  if (!isNatsName(name) || name.length > 64) {
    throw new Error(
      `${describeValue(value, 60)}: ${describeValue(name, 40)} is not a stream name: 1-64 characters, no whitespace, '.', '*', '>', '/' or '\\'; e.g. ORDERS=orders.>`,
    );
  }
  const subjects = m[2] === undefined ? [] : m[2].split(',').map((s) => s.trim());
  for (const subject of subjects) {
    const tokens = subject.split('.');
    const wildcardMisused = tokens.some(
      (t, i) => (t.includes('*') && t !== '*') || (t.includes('>') && (t !== '>' || i !== tokens.length - 1)),
    );
    if (subject === '' || /[\s\0]/.test(subject) || tokens.some((t) => t === '') || wildcardMisused) {
      throw new Error(
        `${describeValue(value, 60)}: ${describeValue(subject, 40)} is not a subject: dot-separated tokens without spaces, '*' a whole token, '>' only last; e.g. ORDERS=orders.>`,
      );
    }
    const reserved = reservedSubjectToken(subject);
    if (reserved !== undefined) {
      throw new Error(
        `${describeValue(value, 60)}: subject ${describeValue(subject, 40)} starts with ${reserved}, which NATS reserves (docs/security.md); use your application's own subjects`,
      );
    }
  }
  return { name, subjects };
}

/**
 * What ensuring a stream would change, computed from the server's answer and
 * changed by nothing: the preview (`--dry-run`, the console's confirm page)
 * and the apply step read the same plan, so they cannot disagree.
 */
export interface StreamPlan {
  name: string;
  /** The stream as it is, or undefined when it does not exist (it will be created). */
  info: StreamInfo | undefined;
  /** Subjects to add (a create adds all of them); never any to remove. */
  add: string[];
  /** Subjects asked for that the stream already covers. */
  covered: string[];
  /** The duplicate window after the change, when it changes (created, or raised). */
  windowMs?: { from: number | undefined; to: number };
  /** The replicas after the change, when it changes (created with more than one, or raised). */
  replicas?: { from: number | undefined; to: number };
}

function isStreamNotFound(err: unknown): boolean {
  return err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound;
}

/**
 * Reads the stream and says what `applyStreamPlan` would do: create it with
 * the subjects and `createWindowMs` (`defaultDuplicateWindowMs()` when not given), or add the
 * subjects it lacks and raise (never lower) its duplicate window to `raiseWindowMs`. A bare name of a stream that
 * does not exist is a ConfigError: a stream needs subjects.
 */
export async function planStream(
  jsm: JetStreamManager,
  spec: StreamSpec,
  windows: { createWindowMs?: number | undefined; raiseWindowMs?: number | undefined; replicas?: number | undefined } = {},
): Promise<StreamPlan> {
  let info: StreamInfo | undefined;
  try {
    info = await jsm.streams.info(spec.name);
  } catch (err) {
    if (!isStreamNotFound(err)) throw err;
  }
  const wanted = [...new Set(spec.subjects)];
  if (!info) {
    if (wanted.length === 0) {
      throw new ConfigError(
        'NAME=SUBJECTS',
        `stream ${spec.name} does not exist, and no subjects were given to create it with: give them, e.g. ${spec.name}=orders.>`,
      );
    }
    const to = Math.max(windows.createWindowMs ?? defaultDuplicateWindowMs(), windows.raiseWindowMs ?? 0);
    const replicas = windows.replicas !== undefined && windows.replicas > 1 ? { replicas: { from: undefined, to: windows.replicas } } : {};
    return { name: spec.name, info, add: wanted, covered: [], windowMs: { from: undefined, to }, ...replicas };
  }
  const existing = info.config.subjects ?? [];
  const covered = wanted.filter((subject) => existing.some((p) => subjectCovers(p, subject)));
  const add = wanted.filter((subject) => !covered.includes(subject));
  const from = Math.round(info.config.duplicate_window / 1e6);
  const raise = windows.raiseWindowMs !== undefined && windows.raiseWindowMs > from;
  const replicasNow = info.config.num_replicas || 1;
  const more = windows.replicas !== undefined && windows.replicas > replicasNow;
  return {
    name: spec.name,
    info,
    add,
    covered,
    ...(raise ? { windowMs: { from, to: windows.raiseWindowMs as number } } : {}),
    ...(more ? { replicas: { from: replicasNow, to: windows.replicas as number } } : {}),
  };
}

/**
 * The plan that adds one subject to one stream (the console's form), and the other stream that
 * binds the subject already, if one does: JetStream refuses two streams with overlapping subjects.
 */
export async function planSubject(
  jsm: JetStreamManager,
  stream: string,
  subject: string,
): Promise<{ plan: StreamPlan; heldBy: string | null }> {
  const plan = await planStream(jsm, { name: stream, subjects: [subject] });
  const holder = (await streamsBinding(jsm, [subject])).get(subject) ?? null;
  return { plan, heldBy: holder !== null && holder !== stream ? holder : null };
}

/** Whether the plan changes anything. */
export function planChanges(plan: StreamPlan): boolean {
  return plan.info === undefined || plan.add.length > 0 || plan.windowMs !== undefined || plan.replicas !== undefined;
}

/** The plan in words, one line, for the CLI, the console and the relay's log. */
export function describePlan(plan: StreamPlan, done = false): string {
  const fmt = (ms: number) => formatDuration(ms);
  if (!plan.info) {
    return `${done ? 'created' : 'would create'} stream ${plan.name} (subjects ${plan.add.join(', ')}; file storage; duplicate window ${fmt(plan.windowMs?.to ?? 0)}${plan.replicas ? `; ${plan.replicas.to} replicas` : ''})`;
  }
  const parts: string[] = [];
  if (plan.add.length > 0)
    parts.push(`${done ? 'added the subject(s) it lacked' : 'would add the subject(s) it lacks'} (${plan.add.join(', ')})`);
  if (plan.windowMs)
    parts.push(`${done ? 'raised' : 'would raise'} its duplicate window from ${fmt(plan.windowMs.from ?? 0)} to ${fmt(plan.windowMs.to)}`);
  if (plan.replicas) parts.push(`${done ? 'raised' : 'would raise'} its replicas from ${plan.replicas.from ?? 1} to ${plan.replicas.to}`);
  if (parts.length === 0) {
    const has = plan.covered.length > 0 ? `: it already binds ${plan.covered.join(', ')}` : '';
    return `stream ${plan.name} needs no change${has}`;
  }
  return `stream ${plan.name} exists: ${parts.join('; ')}; none removed (subjects: ${[...(plan.info.config.subjects ?? []), ...plan.add].join(', ')})`;
}

/**
 * Carries out a plan: creates the stream, or updates it with its own config
 * plus the added subjects and the raised window. A refusal (the subjects
 * overlap another stream's, or the stream is a mirror) is a ConfigError that
 * names the streams already binding them and the fix.
 */
export async function applyStreamPlan(
  jsm: JetStreamManager,
  plan: StreamPlan,
  origin: { option: string; prefix: string } = { option: 'NAME=SUBJECTS', prefix: 'ferry streams ensure' },
): Promise<void> {
  if (!planChanges(plan)) return;
  try {
    if (!plan.info) {
      await jsm.streams.add({
        name: plan.name,
        subjects: plan.add,
        storage: StorageType.File,
        duplicate_window: (plan.windowMs?.to ?? defaultDuplicateWindowMs()) * 1e6,
        ...(plan.replicas ? { num_replicas: plan.replicas.to } : {}),
      });
      return;
    }
    const config = plan.info.config;
    await jsm.streams.update(plan.name, {
      ...config,
      subjects: [...(config.subjects ?? []), ...plan.add],
      ...(plan.windowMs ? { duplicate_window: plan.windowMs.to * 1e6 } : {}),
      ...(plan.replicas ? { num_replicas: plan.replicas.to } : {}),
    });
  } catch (err) {
    if (plan.add.length === 0) {
      throw new ConfigError(
        origin.option,
        `${origin.prefix}: stream ${plan.name} refused the change (${describePlan(plan)}): ${(err as Error).message}`,
        {
          cause: err,
        },
      );
    }
    const holders = new Set<string>();
    for (const subject of plan.add) {
      try {
        for await (const name of jsm.streams.names(subject)) if (name !== plan.name) holders.add(name);
      } catch {
        // the refusal itself is the error to report
      }
    }
    const list = plan.add.join(', ');
    const by = [...holders].join(' or ');
    throw new ConfigError(
      origin.option,
      `${origin.prefix}: stream ${plan.name} ${plan.info ? 'exists and refused the subjects it lacks' : 'could not be created with'} (${list}): ${(err as Error).message}${
        holders.size > 0 ? `; stream(s) ${[...holders].join(', ')} already bind them` : ''
      }. Fix: bind them to one stream only (give them to ${holders.size > 0 ? by : 'another stream'}, or remove them there first), or drop them from ${origin.prefix} ${plan.name}=…`,
      { cause: err },
    );
  }
}
