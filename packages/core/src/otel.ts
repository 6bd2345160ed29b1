// Ferry's one door to OpenTelemetry, shared by the publisher, the relay and the inbox.
//
// `@opentelemetry/api` is an optional peer dependency: when it is not installed, `otel` is
// undefined and every caller skips tracing with one comparison. When it is installed but no SDK
// is registered, the API hands out non-recording spans and Ferry's callers skip the work that only
// a recording span needs (`span.isRecording()`), so tracing costs nothing measurable either way
// (bench/scenarios/otel-overhead.ts).
//
// Span names, kinds and attributes follow the OpenTelemetry messaging semantic conventions as
// published with semantic-conventions v1.30.0 (status Development): operation types `create`
// (publisher), `send` (relay; the type was called `publish` up to v1.27) and `process` (inbox).
import type * as OtelApi from '@opentelemetry/api';
import type { Attributes, Context, Link, Span, SpanContext, SpanKind } from '@opentelemetry/api';

export type Otel = typeof OtelApi;

/** The API when it is installed, else `undefined` (checked once, at load). */
export const otel: Otel | undefined = await import('@opentelemetry/api').catch(() => undefined);

/** The names of every attribute Ferry sets on a span: the conventions' own, then Ferry's (`ferry.*`). */
export const SPAN_ATTRIBUTES = {
  system: 'messaging.system',
  operationType: 'messaging.operation.type',
  operationName: 'messaging.operation.name',
  destination: 'messaging.destination.name',
  subscription: 'messaging.destination.subscription.name',
  consumerGroup: 'messaging.consumer.group.name',
  messageId: 'messaging.message.id',
  bodySize: 'messaging.message.body.size',
  errorType: 'error.type',
  eventKey: 'ferry.event.key',
  eventType: 'ferry.event.type',
  eventVersion: 'ferry.event.version',
  stream: 'ferry.stream',
  streamSequence: 'ferry.stream.sequence',
  attempt: 'ferry.attempt',
  deliveries: 'ferry.deliveries',
  outcome: 'ferry.outcome',
  existing: 'ferry.existing',
  permanent: 'ferry.permanent',
  via: 'ferry.via',
  willRetry: 'ferry.will_retry',
  parkReason: 'ferry.park.reason',
} as const;

/** `messaging.system`: the conventions list no value for NATS, so Ferry uses the system's own name. */
export const MESSAGING_SYSTEM = 'nats';

/**
 * The attributes every span of an event starts with, whichever side makes it: the messaging
 * system, the operation (`create` by the publisher, `send` by the relay, `process` by the inbox)
 * and its name, the subject, and the event's id, key and type. Each side adds its own after these.
 */
export function eventSpanAttributes(
  operationType: 'create' | 'send' | 'process',
  operationName: string,
  event: { readonly id: string; readonly subject: string; readonly key: string; readonly type: string },
): Record<string, string> {
  const A = SPAN_ATTRIBUTES;
  return {
    [A.system]: MESSAGING_SYSTEM,
    [A.operationType]: operationType,
    [A.operationName]: operationName,
    [A.destination]: event.subject,
    [A.messageId]: event.id,
    [A.eventKey]: event.key,
    [A.eventType]: event.type,
  };
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/**
 * The W3C `traceparent`/`tracestate` headers of a span context. Ferry writes
 * them itself rather than through the registered propagator: the wire format
 * (CloudEvents distributed tracing extension) names exactly these two headers,
 * whatever propagator the application chose for HTTP.
 */
export function traceHeaders(sc: SpanContext): Record<string, string> {
  const out: Record<string, string> = {
    traceparent: `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, '0')}`,
  };
  const state = sc.traceState?.serialize();
  if (state) out.tracestate = state;
  return out;
}

/** The remote span context an event carries in `traceparent`/`tracestate`, or `undefined` (none, or malformed). */
export function spanContextFromHeaders(api: Otel, headers: Readonly<Record<string, string>> | null | undefined): SpanContext | undefined {
  const parent = headers && Object.hasOwn(headers, 'traceparent') ? headers.traceparent : undefined;
  const m = parent === undefined ? null : TRACEPARENT.exec(parent);
  if (!m) return undefined;
  const state = Object.hasOwn(headers as object, 'tracestate') ? (headers as Record<string, string>).tracestate : undefined;
  const sc: SpanContext = {
    traceId: m[1] as string,
    spanId: m[2] as string,
    traceFlags: Number.parseInt(m[3] as string, 16) & 1,
    isRemote: true,
    ...(state ? { traceState: api.createTraceState(state) } : {}),
  };
  return api.trace.isSpanContextValid(sc) ? sc : undefined;
}

/**
 * Where a consumer-side span (the relay's `send`, the inbox's `process`) hangs:
 * a child of the event's creation context, so the whole path is one trace, and
 * linked to it as the conventions ask ("SHOULD link to the creation context").
 * Without a creation context the span is a root.
 */
export function creationParent(
  api: Otel,
  headers: Readonly<Record<string, string>> | null | undefined,
): { parent: Context; links: Link[] } {
  const sc = spanContextFromHeaders(api, headers);
  if (!sc) return { parent: api.ROOT_CONTEXT, links: [] };
  return { parent: api.trace.setSpanContext(api.ROOT_CONTEXT, sc), links: [{ context: sc }] };
}

/**
 * Starts a consumer-side span of an event (the relay's `send`, the inbox's `process`) where
 * `creationParent` hangs it, with the tracer named `tracer`. Returns the span and its parent
 * context (the context to run a handler in is the parent with the span set).
 */
export function startConsumerSpan(
  api: Otel,
  tracer: string,
  name: string,
  kind: SpanKind,
  headers: Readonly<Record<string, string>> | null | undefined,
  attributes: Attributes,
): { span: Span; parent: Context } {
  const { parent, links } = creationParent(api, headers);
  return { span: api.trace.getTracer(tracer).startSpan(name, { kind, links, attributes }, parent), parent };
}

/** Ends a span as failed: the exception recorded, the status ERROR, `error.type` set. */
export function failSpan(api: Otel, span: Span, err: unknown, errorType: string): void {
  if (err instanceof Error) span.recordException(err);
  span.setAttribute(SPAN_ATTRIBUTES.errorType, errorType);
  span.setStatus({ code: api.SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
}
