import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

const ROOT = new URL('../../', import.meta.url); // test/dist/ → repo root
const read = (path: string) => readFileSync(new URL(path, ROOT), 'utf8');
const METRICS = new Set([...read('apps/relay/src/daemon/metrics.ts').matchAll(/name: '(ferry_[a-z_]+)'/g)].map((m) => m[1] ?? ''));

interface Panel {
  id: number;
  title: string;
  targets: Array<{ expr: string }>;
}

/**
 * Checks a dashboard: its uid, unique panel ids, a query on every panel, only
 * metrics `metrics` holds (histograms by their _bucket/_sum/_count series),
 * every one of them shown, and `check` on every query.
 */
function checkDashboard(file: string, uid: string, metrics: Set<string>, part: string, check: (title: string, expr: string) => void): void {
  const dash = JSON.parse(read(file)) as { uid: string; panels: Panel[] };
  assert.equal(dash.uid, uid);
  assert.ok(dash.panels.length >= 8);
  assert.equal(new Set(dash.panels.map((p) => p.id)).size, dash.panels.length, 'panel ids are unique');
  const used = new Set<string>();
  for (const p of dash.panels) {
    assert.ok(p.targets.length > 0, `${p.title} has a query`);
    for (const t of p.targets) {
      for (const m of t.expr.matchAll(/ferry_[a-z_]+/g)) {
        const name = m[0].replace(/_(bucket|sum|count)$/, '');
        assert.ok(metrics.has(name), `${p.title}: ${m[0]} is not a ${part} metric`);
        used.add(name);
      }
      check(p.title, t.expr);
    }
  }
  assert.deepEqual(
    [...metrics].filter((m) => !used.has(m)),
    [],
    `every ${part} metric is on the dashboard`,
  );
}

test('deploy - the Grafana dashboard queries only metrics the relay exports, and aggregates the database gauges with max', () => {
  checkDashboard('deploy/grafana/ferry-relay.json', 'ferry-relay', METRICS, 'relay', (title, expr) => {
    for (const gauge of ['ferry_outbox_backlog', 'ferry_outbox_oldest_pending_seconds', 'ferry_dead_events']) {
      if (expr.includes(gauge)) assert.match(expr, new RegExp(`max\\(${gauge}`), `${title}: every instance reports ${gauge}; use max`);
    }
  });
});

const INBOX_METRICS = new Set([...read('packages/inbox/src/metrics.ts').matchAll(/name: '(ferry_inbox_[a-z_]+)'/g)].map((m) => m[1] ?? ''));

test('deploy - the inbox Grafana dashboard queries only metrics the inbox exports, shows every one, and takes the lag gauges with max per consumer', () => {
  assert.ok(INBOX_METRICS.size >= 8, 'the inbox metrics were found in metrics.ts');
  checkDashboard('deploy/grafana/ferry-inbox.json', 'ferry-inbox', INBOX_METRICS, 'inbox', (title, expr) => {
    // Every instance of a consumer samples the same JetStream consumer: summing would multiply the lag.
    for (const gauge of ['ferry_inbox_consumer_pending', 'ferry_inbox_consumer_ack_pending', 'ferry_inbox_consumer_redelivered']) {
      if (expr.includes(gauge)) assert.match(expr, new RegExp(`max by \\(consumer\\) \\(${gauge}`), `${title}: use max for ${gauge}`);
    }
    assert.match(expr, /consumer=~"\$consumer"/, `${title}: filtered by the consumer variable`);
  });
});

test('deploy - the Kubernetes example runs several non-root replicas with /healthz and /readyz probes and the database URL in a Secret', () => {
  const k8s = read('deploy/kubernetes/relay.yaml');
  const docs = k8s.split(/^---$/m);
  const kinds = docs.map((d) => /^kind: (\w+)$/m.exec(d)?.[1]);
  for (const kind of ['Secret', 'Deployment', 'PodDisruptionBudget', 'Service']) assert.ok(kinds.includes(kind), `has a ${kind}`);
  const deployment = docs[kinds.indexOf('Deployment')] ?? '';
  assert.ok(Number(/^ {2}replicas: (\d+)$/m.exec(deployment)?.[1]) >= 2, 'several replicas');
  assert.match(deployment, /livenessProbe:\n\s+httpGet: \{ path: \/healthz, port: http \}/);
  assert.match(deployment, /readinessProbe:\n\s+httpGet: \{ path: \/readyz, port: http \}/);
  assert.match(deployment, /runAsNonRoot: true/);
  assert.match(deployment, /secretRef: \{ name: ferry-relay \}/);
  assert.match(docs[kinds.indexOf('Secret')] ?? '', /FERRY_DATABASE_URL: postgres:\/\//);
  const grace = Number(/terminationGracePeriodSeconds: (\d+)/.exec(deployment)?.[1]);
  const shutdownMs = Number(/FERRY_SHUTDOWN_TIMEOUT_MS: "(\d+)"/.exec(k8s)?.[1]);
  assert.ok(grace * 1000 > shutdownMs, `the grace period ${grace}s outlasts the relay's drain timeout ${shutdownMs}ms`);
  assert.doesNotMatch(k8s, /\t/, 'no tabs in YAML');
  assert.match(read('Dockerfile'), /^USER node$/m, 'the image runs as a non-root user');
});

test('deploy - docker-compose.yml publishes each host port once and scales no service that publishes one', () => {
  // Issue 29: the relay ran with `deploy: replicas: 2` on one fixed host port; the second replica cannot bind.
  const compose = read('docker-compose.yml');
  const hostPorts = [...compose.matchAll(/"127\.0\.0\.1:(\d+):\d+"/g)].map((m) => m[1]);
  assert.ok(hostPorts.length >= 4, `host ports found: ${hostPorts.join(',')}`);
  assert.equal(new Set(hostPorts).size, hostPorts.length, `a host port published twice: ${hostPorts.join(',')}`);
  assert.doesNotMatch(compose, /^\s+replicas:/m, 'no replicas of a service with a fixed host port');
  assert.match(compose, /^ {2}relay-2:\n {4}<<: \*relay\n {4}ports: \["127\.0\.0\.1:9465:9464"\]/m, 'the second relay has its own port');
});
