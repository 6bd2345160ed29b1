import { type JetStreamManager, StorageType } from '@nats-io/jetstream';
import { duplicateWindowShortfall } from '../duplicate-window.js';
import { type RetrySpanOptions, retrySpanMs } from '../relay-options.js';
import type { EnsureStream, Logger } from '../types.js';

/**
 * `--ensure-stream` at start: creates each missing stream (file storage) with a
 * duplicate window of at least the retry span, and warns, with the fix, about
 * an existing one whose window is shorter.
 */
export async function ensureStreams(
  jsm: JetStreamManager,
  options: RetrySpanOptions & { ensureStreams: readonly EnsureStream[] },
  logger: Logger,
): Promise<void> {
  // The retry span already holds every attempt's PubAck timeout; one more covers the last attempt's own.
  const windowMs = Math.max(120_000, retrySpanMs(options) + options.publishTimeoutMs);
  for (const s of options.ensureStreams) {
    try {
      const info = await jsm.streams.info(s.name);
      const short = duplicateWindowShortfall(s.name, info.config.duplicate_window, options);
      if (short) {
        logger.warn(
          { stream: s.name, duplicateWindowMs: short.windowMs, retrySpanMs: short.spanMs, fix: short.fix },
          `stream ${s.name} exists: its ${short.message}; fix: ${short.fix}`,
        );
      }
    } catch {
      await jsm.streams.add({
        name: s.name,
        subjects: [...s.subjects],
        storage: StorageType.File,
        duplicate_window: windowMs * 1e6,
      });
      logger.info({ stream: s.name, subjects: s.subjects, duplicateWindowMs: windowMs }, 'stream created');
    }
  }
}
