import type { Logger } from './types.js';

/**
 * Whether the daemon exports traces: `--otel`, or the standard OpenTelemetry
 * variables asking for an OTLP endpoint. `OTEL_SDK_DISABLED=true` or
 * `OTEL_TRACES_EXPORTER=none` turn it off whatever else is set.
 */
export function traceExportWanted(flag: boolean, env: NodeJS.ProcessEnv): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false;
  const exporters = (env.OTEL_TRACES_EXPORTER ?? '').split(',').map((e) => e.trim().toLowerCase());
  if (exporters.includes('none')) return false;
  return flag || exporters.includes('otlp') || Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
}

/**
 * Registers an OpenTelemetry tracer provider that sends the relay's `send`
 * spans to an OTLP/HTTP collector. The exporter, the batch processor and the
 * sampler read the standard variables (`OTEL_EXPORTER_OTLP_ENDPOINT`,
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_HEADERS`,
 * `OTEL_BSP_*`, `OTEL_TRACES_SAMPLER`); the service is `ferry-relay` unless
 * `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES` say otherwise. Returns
 * the function that flushes and stops it (run after the relay drained).
 */
export async function startTraceExporter(logger: Logger): Promise<() => Promise<void>> {
  // Loaded here, not at the top: a relay that does not export traces never loads the SDK.
  const [{ trace }, { OTLPTraceExporter }, { defaultResource, detectResources, envDetector, resourceFromAttributes }, sdk] =
    await Promise.all([
      import('@opentelemetry/api'),
      import('@opentelemetry/exporter-trace-otlp-http'),
      import('@opentelemetry/resources'),
      import('@opentelemetry/sdk-trace-base'),
    ]);
  const { BasicTracerProvider, BatchSpanProcessor } = sdk;
  const resource = defaultResource()
    .merge(resourceFromAttributes({ 'service.name': 'ferry-relay' }))
    .merge(detectResources({ detectors: [envDetector] }));
  const exporter = new OTLPTraceExporter();
  const provider = new BasicTracerProvider({ resource, spanProcessors: [new BatchSpanProcessor(exporter)] });
  if (!trace.setGlobalTracerProvider(provider)) {
    logger.warn({ event: 'otel' }, 'another OpenTelemetry tracer provider is registered already; the relay exports through it');
  }
  logger.info({ event: 'otel', service: resource.attributes['service.name'] }, 'exporting traces over OTLP/HTTP');
  return async () => {
    try {
      await provider.shutdown(); // flushes the spans still batched
    } catch (err) {
      logger.warn({ err, event: 'otel' }, 'could not flush the last spans to the OTLP collector');
    }
  };
}
