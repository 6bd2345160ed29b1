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
    fix: `ferry streams ensure ${stream} --duplicate-window ${fmt(Math.ceil(spanMs / 60_000) * 60_000)} (or lower the relay's --max-attempts)`,
  };
}

/** The lease options a takeover's re-sends span: the last holder's unmarked sends come again up to this long after it sent them. */
export interface TakeoverSpanOptions {
  leaseTermMs: number;
  publishTimeoutMs: number;
}

/**
 * A stream whose duplicate window is shorter than a takeover's re-send
 * span: the lease term plus the publish timeout. A new holder re-sends from
 * each key's head what the last one sent but did not mark; JetStream drops
 * those copies only inside the window (issue 41: 4,189 ids stored twice at a
 * 1 s window). The relay warns at start and on every takeover; `ferry
 * doctor` reports it. Undefined when the window covers the span.
 */
export function takeoverWindowShortfall(
  stream: string,
  duplicateWindowNs: number,
  options: TakeoverSpanOptions,
): { windowMs: number; spanMs: number; message: string; fix: string } | undefined {
  const windowMs = Math.round(duplicateWindowNs / 1e6);
  const spanMs = options.leaseTermMs + options.publishTimeoutMs;
  if (windowMs >= spanMs) return undefined;
  const fmt = (ms: number) => formatDuration(ms, true);
  return {
    windowMs,
    spanMs,
    message: `duplicate window ${fmt(windowMs)} is shorter than the lease term plus the publish timeout, ${fmt(spanMs)} (--lease-term-ms ${options.leaseTermMs}, --publish-timeout-ms ${options.publishTimeoutMs}): after a takeover, what the last holder sent but did not mark is sent again and stored twice`,
    fix: `ferry streams ensure ${stream} --duplicate-window ${fmt(Math.max(120_000, Math.ceil(spanMs / 60_000) * 60_000))}`,
  };
}
