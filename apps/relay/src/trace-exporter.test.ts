import assert from 'node:assert/strict';
import { test } from 'node:test';
import { traceExportWanted } from './trace-exporter.js';

test('relay - traces are exported with --otel or an OTLP endpoint variable, and never when the SDK is disabled', () => {
  assert.equal(traceExportWanted(false, {}), false, 'off by default');
  assert.equal(traceExportWanted(true, {}), true);
  assert.equal(traceExportWanted(false, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }), true);
  assert.equal(traceExportWanted(false, { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://collector:4318/v1/traces' }), true);
  assert.equal(traceExportWanted(false, { OTEL_TRACES_EXPORTER: 'otlp' }), true);
  assert.equal(traceExportWanted(true, { OTEL_SDK_DISABLED: 'true' }), false);
  assert.equal(traceExportWanted(true, { OTEL_TRACES_EXPORTER: 'none' }), false);
  assert.equal(traceExportWanted(false, { OTEL_EXPORTER_OTLP_ENDPOINT: '' }), false, 'an empty variable is unset');
});
