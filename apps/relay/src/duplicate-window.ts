import { formatDuration } from './duration.js';
import { type RetrySpanOptions, retrySpanMs } from './relay-options.js';

/** A stream whose duplicate window does not cover the relay's retry span: what is wrong, and the fix. */
export interface DuplicateWindowShortfall {
  windowMs: number;
  spanMs: number;
  message: string;
  fix: string;
}

/**
 * The one duplicate-window check: a stream's `duplicate_window` (nanoseconds,
 * as JetStream reports it) against the relay's retry span (`retrySpanMs`).
 * Undefined when the window covers the span. `ferry doctor` reports a
 * shortfall as a problem; a relay that finds one on an `--ensure-stream`
 * stream logs it as a warning, with the same advice.
 */
export function duplicateWindowShortfall(
  stream: string,
  duplicateWindowNs: number,
  options: RetrySpanOptions,
): DuplicateWindowShortfall | undefined {
  const windowMs = Math.round(duplicateWindowNs / 1e6);
  const spanMs = retrySpanMs(options);
  if (windowMs >= spanMs) return undefined;
  const o = options;
  const fmt = (ms: number) => formatDuration(ms, true);
  return {
    windowMs,
    spanMs,
    message: `duplicate window ${fmt(windowMs)} is shorter than the relay's retry span ${fmt(spanMs)} (--max-attempts ${o.maxAttempts}, --backoff-base-ms ${o.backoffBaseMs}, --backoff-max-ms ${o.backoffMaxMs}, --publish-timeout-ms ${o.publishTimeoutMs}, --poll-interval-ms ${o.pollIntervalMs}): a re-send after a lost PubAck could be stored twice`,
    fix: `nats stream edit ${stream} --dupe-window ${fmt(Math.ceil(spanMs / 60_000) * 60_000)} (or lower the relay's --max-attempts)`,
  };
}
