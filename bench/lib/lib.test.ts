/**
 * The benchmark library's own tests (the numbers are checked by the smoke run,
 * `npm run bench -- --quick`, in CI):
 *   npm run build && node --test bench/dist/lib/lib.test.js
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { quoteIdentifier } from '@ferry/core';
import { createTestDatabase, createTestStream, natsUrl, type TestDatabase } from '@ferry/testkit';
import { missingNumbers } from './checks.js';
import { generateRows, makeRows, relayDrain } from './outbox.js';
import { cpuSecondsOf, localPortsOf } from './proc.js';
import { cpuMeter, type RelayProcess } from './relay-process.js';
import { percentile, summarize } from './stats.js';
import { lineChart } from './svg.js';

const SCENARIO_FILES = readdirSync(new URL('../scenarios/', import.meta.url)).filter((f) => f.endsWith('.js'));

let db: TestDatabase;
before(async () => {
  db = await createTestDatabase({ prefix: 'bench_lib', lanes: 4, max: 4 });
});
after(async () => {
  await db.close();
});

test('bench stats - the median, spread and percentiles of trials', () => {
  const s = summarize([30, 10, 20]);
  assert.equal(s.median, 20);
  assert.equal(s.spread, 0.5);
  assert.equal(percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 90), 9);
  assert.ok(Number.isNaN(percentile([], 50)));
});

test('bench checks - a missing or non-finite number fails the smoke run, a complete result passes', () => {
  assert.deepEqual(missingNumbers('relay-latency', undefined), ['(no result file)']);
  const lat = { headline: { worstP99MsDefaults: 4 }, runs: [{ p50Ms: 1, p999Ms: Number.NaN }, { p99Ms: 3 }] };
  assert.deepEqual(missingNumbers('relay-latency', lat), ['runs.0.p999Ms']);
  lat.runs[0] = { p50Ms: 1, p999Ms: 6 };
  assert.deepEqual(missingNumbers('relay-latency', lat), []);
});

test('bench args - every entry point prints its usage on --help (exit 0) and names an unknown flag (exit 2) before touching anything', () => {
  const entries = ['../run.js', '../publish-overhead.js', '../inbox-throughput.js', ...SCENARIO_FILES.map((f) => `../scenarios/${f}`)];
  for (const entry of entries) {
    const file = fileURLToPath(new URL(entry, import.meta.url));
    const help = spawnSync(process.execPath, [file, '--help'], { encoding: 'utf8', timeout: 30_000 });
    assert.equal(help.status, 0, `${entry} --help: ${help.stderr}`);
    assert.match(help.stdout, /^usage: .*\n[\s\S]*--help/, `${entry} --help prints a usage`);
    const bad = spawnSync(process.execPath, [file, '--no-such-flag'], { encoding: 'utf8', timeout: 30_000 });
    assert.equal(bad.status, 2, `${entry} --no-such-flag exits 2`);
    assert.match(bad.stderr, /--no-such-flag/, `${entry} names the unknown flag`);
  }
});

test('bench svg - one path per series, a gap where a value is missing, escaped labels', () => {
  const svg = lineChart({
    title: 'a <b> & c',
    xLabel: 'x',
    yLabel: 'y',
    logY: true,
    categories: ['1', '2', '3'],
    series: [
      { name: 'one', values: [1, 10, 100] },
      { name: 'two', values: [5, undefined, 50], dashed: true },
    ],
  });
  assert.match(svg, /^<svg [^>]*xmlns="http:\/\/www.w3.org\/2000\/svg"/);
  assert.match(svg, /a &lt;b&gt; &amp; c/);
  const paths = [...svg.matchAll(/<path d="([^"]+)"/g)].map((m) => m[1] ?? '');
  assert.equal(paths.length, 2);
  assert.equal(paths[1]?.match(/M/g)?.length, 2, 'the missing point splits the second line');
  assert.ok(svg.trimEnd().endsWith('</svg>'));
});

test('bench svg - every point lies inside the plot area on a linear axis', () => {
  const svg = lineChart({ title: 't', xLabel: 'x', yLabel: 'y', categories: ['a', 'b'], series: [{ name: 's', values: [2884, 6835] }] });
  const ys = [...svg.matchAll(/<circle cx="[^"]+" cy="([^"]+)"/g)].map((m) => Number(m[1]));
  assert.equal(ys.length, 2);
  for (const y of ys) assert.ok(y >= 40 && y <= 400 - 56, `point at y=${y} is outside the plot`);
});

test('bench proc - CPU seconds and local TCP ports of this process', async () => {
  const cpu = cpuSecondsOf(process.pid);
  assert.ok(cpu !== undefined && cpu >= 0);
  assert.equal(cpuSecondsOf(2 ** 22 + 12345), undefined);
  const { rows } = await db.pool.query<{ port: number }>('SELECT inet_client_port() AS port');
  assert.ok(localPortsOf(process.pid).includes(Number(rows[0]?.port)), 'the pool connection port is among ours');
});

test('bench cpu meter - a backend that comes and goes during the measurement is counted', async () => {
  // A stand-in for a relay: a process whose connection burns PostgreSQL CPU, closes, and a second one does too.
  const burn = 'SELECT count(*) FROM generate_series(1, 4000000)';
  const script = `import pg from 'pg';
    await new Promise((r) => process.stdin.once('data', r));
    for (let i = 0; i < 2; i++) { const c = new pg.Client(${JSON.stringify(db.url)}); await c.connect(); await c.query(${JSON.stringify(burn)}); await c.end(); }
    console.log('done'); await new Promise((r) => setTimeout(r, 60000));`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
    cwd: fileURLToPath(new URL('../../../', import.meta.url)),
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  try {
    const pid = child.pid as number;
    const relay = { pid, cpuSeconds: () => cpuSecondsOf(pid) ?? 0 } as RelayProcess;
    const meter = await cpuMeter(db.pool, [relay], { sampleMs: 50 });
    const done = new Promise((resolve) => child.stdout?.once('data', resolve));
    child.stdin?.write('go\n');
    await Promise.race([done, new Promise((_, reject) => setTimeout(() => reject(new Error('the child did not finish in 60 s')), 60_000))]);
    const m = await meter.stop();
    // Neither connection existed when the meter started, and neither exists when it stops.
    const single = performance.now();
    await db.pool.query(burn);
    const oneMs = performance.now() - single;
    assert.equal(m.backends, 2, 'both connections were seen');
    assert.ok(
      m.postgresSeconds > (2 * oneMs) / 1000 / 4,
      `${m.postgresSeconds} s of backend CPU for two queries of ${oneMs.toFixed(0)} ms each`,
    );
  } finally {
    child.kill('SIGKILL');
  }
});

test('bench outbox - generated rows are unique per key and version, and a relay drains them all', async () => {
  const s = quoteIdentifier(db.schema);
  await generateRows(db.pool, db.schema, { count: 1000, keys: 10, keyPrefix: 'old-', subject: 'x.y', publishedAgoMs: 86_400_000 }, 0, 300);
  const { rows } = await db.pool.query<{ n: string; versions: string; old: string; pending: string }>(
    `SELECT count(*) AS n, count(DISTINCT (o.key, o.version)) AS versions,
            count(*) FILTER (WHERE d.published_at < now() - interval '23 hours') AS old,
            count(p.seq) AS pending
       FROM ${s}.outbox o LEFT JOIN ${s}.outbox_published d ON d.seq = o.seq LEFT JOIN ${s}.outbox_pending p ON p.seq = o.seq`,
  );
  // Published rows: each has its outbox_published row, and no pending row is left of them (outbox migration 000015).
  assert.deepEqual(rows[0], { n: '1000', versions: '1000', old: '1000', pending: '0' });
  const made = makeRows({ count: 20, keys: 3, keyPrefix: 'k', subject: 'x.y' });
  // The raw baseline publishes exactly the bytes the relay reads from the generated rows.
  const first = await db.pool.query<{ data: Buffer }>(`SELECT data FROM ${s}.outbox WHERE key = 'old-1' AND version = 1`);
  const g1 = makeRows({ count: 2, keys: 10, keyPrefix: 'old-', subject: 'x.y' })[1];
  assert.equal(first.rows[0]?.data.toString(), g1?.data.toString());
  assert.ok((g1?.data.byteLength ?? 0) >= 190, `payload of about 200 bytes, got ${g1?.data.byteLength}`);
  assert.deepEqual(
    made.slice(0, 4).map((r) => `${r.key}@${r.version}`),
    ['k0@1', 'k1@1', 'k2@1', 'k0@2'],
  );
  const stream = await createTestStream({ prefix: 'benchlib' });
  try {
    const eps = await relayDrain(
      db.pool,
      db.schema,
      { databaseUrl: db.url, schema: db.schema, nats: { servers: natsUrl() } },
      { count: 500, keys: 50, keyPrefix: 'new-', subject: `${stream.prefix}.orders` },
    );
    assert.ok(eps > 0);
    assert.equal((await stream.jsm.streams.info(stream.name)).state.messages, 500);
  } finally {
    await stream.close();
  }
});
