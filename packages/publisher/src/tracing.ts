import { SPAN_ATTRIBUTES as A, eventSpanAttributes, failSpan, otel, traceHeaders } from '@ferry/core';
import type { Span } from '@opentelemetry/api';
import type { PublishResult } from './types.js';

const TRACER = '@ferry/publisher';

/**
 * The `create` spans of one publish call (OpenTelemetry messaging conventions:
 * one PRODUCER span per message, a child of the caller's active span, whose
 * context becomes the message's creation context). Made only while a
 * recording span is active: with no SDK, or outside any span, a publish does
 * no tracing work at all.
 */
export class CreateSpans {
  readonly #spans = new Map<string, Span>();

  /** The active span's publish call, or `undefined` when there is nothing to trace. */
  static begin(): CreateSpans | undefined {
    if (!otel) return undefined;
    const active = otel.trace.getActiveSpan();
    return active?.isRecording() ? new CreateSpans() : undefined;
  }

  /**
   * The event's headers with its creation context: a new `create` span's.
   * An explicit `traceparent` is the caller's own creation context and wins
   * (the conventions: a custom creation context is not modified and no
   * `create` span is made).
   *
   * An event with a caller-supplied id gets no `create` span either: the
   * outbox compares a re-published id's headers with the stored ones, so a
   * retry under another trace would be refused as a conflict. Set
   * `traceparent` yourself for such events if you need it.
   */
  headers(
    headers: Record<string, string>,
    event: { id: string; key: string; subject: string; type: string },
    explicitId: boolean,
  ): Record<string, string> {
    if (!otel || explicitId || Object.hasOwn(headers, 'traceparent')) return headers;
    const span = otel.trace.getTracer(TRACER).startSpan(`create ${event.subject}`, {
      kind: otel.SpanKind.PRODUCER,
      attributes: eventSpanAttributes('create', 'create', event),
    });
    this.#spans.get(event.id)?.end(); // the same id twice is refused later; never leave a span open
    this.#spans.set(event.id, span);
    return { ...headers, ...traceHeaders(span.spanContext()) };
  }

  /** Ends every span with the version the outbox assigned (and whether the id was already there). */
  end(results: readonly PublishResult[]): void {
    for (const r of results) {
      const span = this.#spans.get(r.id);
      span?.setAttributes({
        [A.eventVersion]: r.version.toString(),
        [A.existing]: r.existing,
        [A.outcome]: r.existing ? 'existing' : 'written',
      });
    }
    for (const span of this.#spans.values()) span.end();
  }

  /** Ends every span as failed: the publish threw (refused input, conflict, database error). */
  fail(err: unknown): void {
    for (const span of this.#spans.values()) {
      if (otel) failSpan(otel, span, err, err instanceof Error ? err.name : 'Error');
      span.end();
    }
  }
}

/** Runs one publish call with its `create` spans, ending them however the call ends. */
export async function withCreateSpans(fn: (spans: CreateSpans | undefined) => Promise<PublishResult[]>): Promise<PublishResult[]> {
  const spans = CreateSpans.begin();
  if (!spans) return fn(undefined);
  try {
    const results = await fn(spans);
    spans.end(results);
    return results;
  } catch (err) {
    spans.fail(err);
    throw err;
  }
}
