// tracing.ts: load it first (node --import ./dist/tracing.js dist/main.js), so the SDK is
// registered before Ferry and your HTTP framework run. @opentelemetry/sdk-node's NodeSDK does
// the same in one call, with auto-instrumentation for HTTP, Express, Fastify and pg.
import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';

export const provider = new BasicTracerProvider({
  resource: resourceFromAttributes({ 'service.name': 'orders-service' }),
  // Sends to OTEL_EXPORTER_OTLP_ENDPOINT (default http://localhost:4318): Jaeger, Tempo, the Collector.
  spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
});
trace.setGlobalTracerProvider(provider);
// The active span follows async calls: what lets publish() find the request's span.
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
propagation.setGlobalPropagator(new W3CTraceContextPropagator());
// On shutdown, after the inbox stopped: await provider.shutdown() sends the last spans.
