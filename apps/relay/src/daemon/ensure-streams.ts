import { ConfigError } from '@ferry/core';
import { JetStreamApiCodes, JetStreamApiError, type JetStreamManager, StorageType, type StreamInfo } from '@nats-io/jetstream';
import { duplicateWindowShortfall } from '../duplicate-window.js';
import { type RetrySpanOptions, retrySpanMs } from '../relay-options.js';
import type { EnsureStream, Logger } from '../types.js';

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

function isStreamNotFound(err: unknown): boolean {
  return err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound;
}

/**
 * `--ensure-stream` at start: creates each missing stream (file storage) with a
 * duplicate window of at least the retry span; adds to an existing one the
 * subjects it lacks (never removing any: other producers may rely on them),
 * and warns, with the fix, about one whose window is shorter. A stream that
 * refuses the added subjects (they overlap another stream's, or it is a
 * mirror) ends the start with a ConfigError naming the stream, the subjects
 * and the fix.
 */
export async function ensureStreams(
  jsm: JetStreamManager,
  options: RetrySpanOptions & { ensureStreams: readonly EnsureStream[] },
  logger: Logger,
): Promise<void> {
  // The retry span already holds every attempt's PubAck timeout; one more covers the last attempt's own.
  const windowMs = Math.max(120_000, retrySpanMs(options) + options.publishTimeoutMs);
  for (const s of options.ensureStreams) {
    let info: StreamInfo;
    try {
      info = await jsm.streams.info(s.name);
    } catch (err) {
      if (!isStreamNotFound(err)) throw err;
      await jsm.streams.add({
        name: s.name,
        subjects: [...s.subjects],
        storage: StorageType.File,
        duplicate_window: windowMs * 1e6,
      });
      logger.info({ stream: s.name, subjects: s.subjects, duplicateWindowMs: windowMs }, 'stream created');
      continue;
    }
    await addMissingSubjects(jsm, info, s, logger);
    const short = duplicateWindowShortfall(s.name, info.config.duplicate_window, options);
    if (short) {
      logger.warn(
        { stream: s.name, duplicateWindowMs: short.windowMs, retrySpanMs: short.spanMs, fix: short.fix },
        `stream ${s.name} exists: its ${short.message}; fix: ${short.fix}`,
      );
    }
  }
}

async function addMissingSubjects(jsm: JetStreamManager, info: StreamInfo, s: EnsureStream, logger: Logger): Promise<void> {
  const existing = info.config.subjects ?? [];
  const missing = [...new Set(s.subjects)].filter((subject) => !existing.some((p) => subjectCovers(p, subject)));
  if (missing.length === 0) return;
  const subjects = [...existing, ...missing];
  try {
    await jsm.streams.update(s.name, { ...info.config, subjects });
  } catch (err) {
    // Name the streams that already bind them: the usual refusal is an overlap with another stream.
    const holders = new Set<string>();
    for (const subject of missing) {
      try {
        for await (const name of jsm.streams.names(subject)) if (name !== s.name) holders.add(name);
      } catch {
        // the refusal itself is the error to report
      }
    }
    const list = missing.join(', ');
    throw new ConfigError(
      '--ensure-stream',
      `--ensure-stream ${s.name}: stream ${s.name} exists and refused the subjects it lacks (${list}): ${(err as Error).message}${
        holders.size > 0 ? `; stream(s) ${[...holders].join(', ')} already bind them` : ''
      }. Fix: bind them to one stream only (give them to ${holders.size > 0 ? [...holders].join(' or ') : 'another stream'}, or remove them there first), or drop them from --ensure-stream ${s.name}=…`,
      { cause: err },
    );
  }
  logger.info(
    { stream: s.name, added: missing, subjects },
    `stream ${s.name} exists: added the subject(s) it lacked (${missing.join(', ')}); none removed`,
  );
}
