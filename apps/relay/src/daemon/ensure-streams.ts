import type { JetStreamManager } from '@nats-io/jetstream';
import { applyStreamPlan, defaultDuplicateWindowMs, describePlan, planChanges, planStream } from '../actions/streams.js';
import { duplicateWindowShortfall } from '../duplicate-window.js';
import { type RetrySpanOptions, retrySpanMs } from '../relay-options.js';
import type { EnsureStream, Logger } from '../types.js';

/**
 * `--ensure-stream` at start: creates each missing stream (file storage) with a
 * duplicate window of at least the retry span; adds to an existing one the
 * subjects it lacks (never removing any: other producers may rely on them),
 * and warns, with the fix, about one whose window is shorter. A stream that
 * refuses the added subjects (they overlap another stream's, or it is a
 * mirror) ends the start with a ConfigError naming the stream, the subjects
 * and the fix. The plan and its apply step are `ferry streams ensure`'s.
 */
export async function ensureStreams(
  jsm: JetStreamManager,
  options: RetrySpanOptions & { ensureStreams: readonly EnsureStream[] },
  logger: Logger,
): Promise<void> {
  const createWindowMs = defaultDuplicateWindowMs(retrySpanMs(options), options.publishTimeoutMs);
  for (const s of options.ensureStreams) {
    const plan = await planStream(jsm, s, { createWindowMs });
    await applyStreamPlan(jsm, plan, { option: '--ensure-stream', prefix: `--ensure-stream ${s.name}` });
    if (planChanges(plan)) {
      logger.info({ stream: s.name, added: plan.add, duplicateWindowMs: plan.windowMs?.to }, describePlan(plan, true));
    }
    if (!plan.info) continue;
    const short = duplicateWindowShortfall(s.name, plan.info.config.duplicate_window, options);
    if (short) {
      logger.warn(
        { stream: s.name, duplicateWindowMs: short.windowMs, retrySpanMs: short.spanMs, fix: short.fix },
        `stream ${s.name} exists: its ${short.message}; fix: ${short.fix}`,
      );
    }
  }
}
