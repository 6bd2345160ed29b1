import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Registry } from 'prom-client';
import { InboxMetrics, startLagSampler } from './metrics.js';

// A consumer-info answer that arrives after stop must not bring back the gauges stop dropped
// (the inbox-metrics suite caught a stopped inbox still reporting its lag).
test('inbox metrics - a lag sample answered after stop leaves no lag series', async () => {
  const registry = new Registry();
  const metrics = new InboxMetrics(registry, 'billing', () => 0);
  let answer: (info: { num_pending: number; num_ack_pending: number; num_redelivered: number }) => void = () => {};
  const stop = startLagSampler(metrics, () => new Promise((resolve) => (answer = resolve)), 60_000, { warn() {} });
  stop();
  answer({ num_pending: 7, num_ack_pending: 1, num_redelivered: 0 });
  await new Promise((r) => setImmediate(r));
  const pending = (await registry.getSingleMetric('ferry_inbox_consumer_pending')?.get())?.values ?? [];
  assert.deepEqual(pending, []);
});
