import { AsyncLocalStorage } from 'node:async_hooks';
import type { FerryEvent } from '@ferry/core';
import { SPAN_ATTRIBUTES as A, eventSpanAttributes, failSpan, otel, startConsumerSpan } from '@ferry/core';
import type { Span } from '@opentelemetry/api';
import type { InboxReport } from './types.js';

const TRACER = '@ferry/inbox';

/** Where a message came from when it reached the gate. */
export interface ProcessSource {
  /** The attempt as the inbox counts it (gap waits are not attempts). */
  attempt: number;
  /** JetStream deliveries of the message (1 for the first), when it came from the stream. */
  deliveries?: number;
  streamSequence?: number;
  /** `stream`, `park` (the park worker) or `early` (a stored early version, `sequential` mode). */
  via: 'stream' | 'park' | 'early';
}

/**
 * The process span of the message being handled, found by the `onEvent`
 * wrapper to set the outcome: its own store rather than the OpenTelemetry
 * context, which a handler may change and which needs a context manager.
 */
const current = new AsyncLocalStorage<Span>();

/**
 * Runs gate → handler → COMMIT (and the settling that follows) inside the
 * message's `process` span (OpenTelemetry messaging conventions: kind
 * CONSUMER, one span per message, linked to the event's creation context and,
 * being a single message, its child, so the publisher's, the relay's and the
 * inbox's spans are one trace). The handler runs in the span's context, so
 * the spans it makes nest under it. With no SDK, or without
 * `@opentelemetry/api`, `fn` runs as is.
 */
export async function inProcessSpan<T>(
  event: FerryEvent,
  stream: string,
  consumer: string,
  source: ProcessSource,
  fn: () => Promise<T>,
): Promise<T> {
  if (!otel) return fn();
  const api = otel;
  const { span, parent } = startConsumerSpan(api, TRACER, `process ${event.subject}`, api.SpanKind.CONSUMER, event.headers, {
    ...eventSpanAttributes('process', 'process', event),
    [A.subscription]: consumer,
    [A.consumerGroup]: consumer,
    [A.bodySize]: event.data.byteLength,
    [A.eventVersion]: event.version.toString(),
    [A.stream]: stream,
    [A.attempt]: source.attempt,
    [A.via]: source.via,
    ...(source.deliveries === undefined ? {} : { [A.deliveries]: source.deliveries }),
    ...(source.streamSequence === undefined ? {} : { [A.streamSequence]: source.streamSequence }),
  });
  if (!span.isRecording()) return fn();
  try {
    return await current.run(span, () => api.context.with(api.trace.setSpan(parent, span), fn));
  } catch (err) {
    failSpan(api, span, err, err instanceof Error ? err.name : 'Error');
    throw err;
  } finally {
    span.end();
  }
}

/**
 * Puts a report's outcome on the process span it belongs to: `ferry.outcome`
 * (applied, stale, duplicate, gap, failed, parked), and for a failure or a
 * parked event why. The last report of a message wins (a failed attempt that
 * then parks shows `parked`).
 */
export function markOutcome(report: InboxReport): void {
  const span = current.getStore();
  if (!span || !otel) return;
  span.setAttribute(A.outcome, report.kind);
  if (report.kind === 'parked') span.setAttribute(A.parkReason, report.reason);
  if (report.kind === 'failed') {
    failSpan(otel, span, report.error, report.error instanceof Error ? report.error.name : 'Error');
    span.setAttribute(A.willRetry, report.willRetry);
  }
}
