import { SPAN_ATTRIBUTES as A, eventSpanAttributes, failSpan, otel, startConsumerSpan, traceHeaders } from '@ferry/core';
import type { PubAck } from '@nats-io/jetstream';
import type { Span } from '@opentelemetry/api';
import type { Classified } from '../errors.js';
import type { ClaimedRow } from '../sql/claim-batch.js';

const TRACER = '@ferry/relay';

/**
 * The relay's `send` span of one outbox row (OpenTelemetry messaging
 * conventions, one span per message: the relay sends a key's rows one at a
 * time, each after the previous PubAck, so a batch span would only blur which
 * row waited). Its kind is CLIENT, as the conventions ask of a send whose
 * context is not the creation context. It is a child of the event's creation
 * context (the publisher's `create` span), and links to it, so the event's
 * path is one trace; a row without one starts a trace of its own and its
 * context travels as the creation context instead.
 */
export class SendSpan {
  readonly #span: Span;

  private constructor(span: Span) {
    this.#span = span;
  }

  /** A span for the row, or `undefined` when `@opentelemetry/api` is not installed or nothing records. */
  static start(row: ClaimedRow): SendSpan | undefined {
    if (!otel) return undefined;
    const { span } = startConsumerSpan(otel, TRACER, `send ${row.subject}`, otel.SpanKind.CLIENT, row.headers, {
      ...eventSpanAttributes('send', 'publish', row),
      [A.bodySize]: row.data_bytes,
      [A.eventVersion]: row.version,
      [A.attempt]: row.attempts + 1,
    });
    if (!span.isRecording()) return undefined;
    return new SendSpan(span);
  }

  /** The row's headers, with this span's context as the creation context when the event has none. */
  headers(headers: Record<string, string>): Record<string, string> {
    if (Object.hasOwn(headers, 'traceparent')) return headers;
    return { ...headers, ...traceHeaders(this.#span.spanContext()) };
  }

  /** JetStream acknowledged the message (a duplicate PubAck is a success too). */
  acked(ack: PubAck): void {
    this.#span.setAttributes({
      [A.stream]: ack.stream,
      [A.streamSequence]: ack.seq,
      [A.outcome]: ack.duplicate ? 'duplicate' : 'acked',
    });
    this.#span.end();
  }

  /** The row was not sent: its lane's lease ran out before the send (it is its new holder's). */
  notSent(): void {
    this.#span.setAttributes({ [A.outcome]: 'lease_lost' });
    this.#span.end();
  }

  /** The row was refused or failed; `failure.reason` is the relay's failure reason (as in `ferry_publish_failures_total`). */
  failed(failure: Classified, err?: unknown): void {
    if (otel) failSpan(otel, this.#span, err ?? new Error(failure.message), failure.reason);
    this.#span.setAttributes({ [A.outcome]: failure.reason, [A.permanent]: failure.permanent });
    this.#span.end();
  }
}
