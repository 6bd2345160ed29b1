/**
 * The benchmark runner: every scenario in its own child process (one at a
 * time, each with its own schema and streams), then one table of headline
 * figures beside their same-run baselines, `bench/results/latest.json`,
 * `docs/benchmarks.md` and the SVG charts under `docs/`.
 *
 *   npm run bench                 the full run (about 15 minutes on 2 cores)
 *   npm run bench -- --quick      the smoke run (under a minute): checks that every scenario
 *                                 produced numbers (never thresholds) and writes its output
 *                                 under bench/results/quick/, leaving the committed results alone
 *   npm run bench -- --only relay-sweep,cost   some scenarios (output under bench/results/partial/)
 *   npm run bench -- --render     docs/benchmarks.md and charts again from bench/results/latest.json
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { fileURLToPath } from 'node:url';
import { natsUrl } from '@ferry/testkit';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';
import { arg } from './lib/args.js';
import { missingNumbers } from './lib/checks.js';
import { renderMarkdown } from './lib/report.js';
import { fmt, hasFlag, printTable } from './lib/stats.js';
import { lineChart } from './lib/svg.js';

const QUICK = hasFlag('quick');
const ONLY = arg('only', '')
  .split(',')
  .filter((s) => s !== '');

interface ScenarioSpec {
  name: string;
  title: string;
  script: string;
  result: string;
  quick: string[];
  full: string[];
}

/** In the order they run. `result` is the file the script writes under bench/results/. */
export const SCENARIOS: readonly ScenarioSpec[] = [
  {
    name: 'publisher',
    title: '1. Publisher overhead',
    script: 'publish-overhead.js',
    result: 'publisher',
    quick: ['--quick', '--seconds', '1', '--trials', '1'],
    full: ['--writers', '8,32', '--seconds', '3', '--trials', '3'],
  },
  {
    name: 'relay-sweep',
    title: '2. Relay drain and the batch x in-flight sweep',
    script: 'scenarios/relay-sweep.js',
    result: 'relay-sweep',
    quick: ['--quick'],
    full: [],
  },
  {
    name: 'relay-load',
    title: '3. Commit-to-ack latency under open-loop load',
    script: 'scenarios/relay-load.js',
    result: 'relay-load',
    quick: ['--quick', '--seconds', '1'],
    full: [],
  },
  {
    name: 'inbox',
    title: '4. Inbox vs a plain consumer',
    script: 'inbox-throughput.js',
    result: 'inbox',
    quick: ['--quick', '--events', '600', '--keys', '200'],
    full: ['--events', '8000', '--trials', '3'],
  },
  {
    name: 'alternatives',
    title: '5. The alternatives: pg-boss as the outbox, a naive relay',
    script: 'scenarios/alternatives.js',
    result: 'alternatives',
    quick: ['--quick'],
    full: [],
  },
  {
    name: 'growth',
    title: '6. Growth: retained published rows',
    script: 'scenarios/growth.js',
    result: 'growth',
    quick: ['--quick'],
    full: [],
  },
  {
    name: 'blocked-key',
    title: "8. A blocked hot key: claim cost and the other keys' drain",
    script: 'scenarios/blocked-key.js',
    result: 'blocked-key',
    quick: ['--quick'],
    full: [],
  },
  {
    name: 'key-spread',
    title: '9. Relay drain by key spread: 1 hot key, 10 keys, 1,000 keys (file storage)',
    script: 'scenarios/key-spread.js',
    result: 'key-spread',
    quick: ['--quick'],
    full: [],
  },
  {
    name: 'cost',
    title: '7. Cost: CPU per 1,000 events',
    script: 'scenarios/cost.js',
    result: 'cost',
    quick: ['--quick'],
    full: [],
  },
];

const dist = new URL('./', import.meta.url);
const results = new URL('../results/', import.meta.url);
const repo = new URL('../../', import.meta.url);

function runScenario(s: ScenarioSpec): Promise<{ code: number; seconds: number }> {
  const args = QUICK ? s.quick : s.full;
  console.log(`\n=== ${s.title}: node bench/dist/${s.script} ${args.join(' ')}`);
  const started = performance.now();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [fileURLToPath(new URL(s.script, dist)), ...args], { stdio: 'inherit' });
    child.on('exit', (code, signal) => resolve({ code: code ?? (signal ? 1 : 0), seconds: (performance.now() - started) / 1000 }));
  });
}

async function describeMachine() {
  const pool = new pg.Pool({ connectionString: process.env.FERRY_TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test', max: 1 });
  let postgres = 'unknown';
  const settings: Record<string, string> = {};
  try {
    postgres = (await pool.query<{ server_version: string }>('SHOW server_version')).rows[0]?.server_version ?? 'unknown';
    for (const name of ['shared_buffers', 'synchronous_commit', 'max_connections']) {
      settings[name] = (await pool.query<Record<string, string>>(`SHOW ${name}`)).rows[0]?.[name] ?? '';
    }
  } finally {
    await pool.end();
  }
  const nc = await connect({ servers: natsUrl(), name: 'ferry-bench' });
  const nats = nc.info?.version ?? 'unknown';
  await nc.close();
  return {
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model ?? 'unknown',
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    loadAverageAtStart: loadavg().map((x) => Number(x.toFixed(2))),
    node: process.version,
    postgres,
    postgresSettings: settings,
    natsServer: nats,
  };
}

// biome-ignore lint/suspicious/noExplicitAny: scenario results are read back from JSON
type Json = any;

function readResult(name: string): Json | undefined {
  const file = new URL(`${name}.json`, results);
  if (!existsSync(file)) return undefined;
  return JSON.parse(readFileSync(file, 'utf8'));
}

/** The figures the issue asks for, each beside the baseline it is divided by. */
function headline(r: Record<string, Json>) {
  const pub = r.publisher;
  const sweep = r['relay-sweep'];
  const load = r['relay-load'];
  const inbox = r.inbox;
  const alt = r.alternatives;
  const firstWriters = pub ? Object.keys(pub.results ?? {})[0] : undefined;
  const at50 = load?.runs?.find((x: Json) => x.listen && x.loadPercent === 50);
  const ratios = {
    publishOverhead: pub?.ratios?.[`publish@${firstWriters}`],
    relayVsRawJetStream: sweep?.headline?.ratio?.median,
    inboxVsPlainConsumer: inbox?.results?.fresh?.ratio,
    relayVsPgBossOutbox: alt?.relayVsPgBossOutbox,
    relayVsNaiveRelay: alt?.relayVsNaiveRelay,
  };
  return {
    ratios,
    relay: {
      eventsPerSec: sweep?.headline?.relay?.median,
      commitToAckMs: { p50: at50?.p50Ms, p99: at50?.p99Ms, p999: at50?.p999Ms },
      commitToAckAt: at50
        ? `LISTEN, 50% of capacity (${fmt(at50.offeredPerSec)} events/s)${at50.sustainable ? '' : ' UNSUSTAINABLE'}`
        : undefined,
      capacityPerSec: load?.capacityPerSec,
    },
    publisher: { txPerSec: firstWriters ? pub?.results?.[firstWriters]?.publish?.median : undefined, writers: Number(firstWriters) },
    inbox: { eventsPerSec: inbox?.results?.fresh?.inbox?.median },
    targets: {
      publishOverhead: { target: '<= 1.3', met: ratios.publishOverhead <= 1.3 },
      relayVsRawJetStream: { target: '>= 0.8', met: ratios.relayVsRawJetStream >= 0.8 },
      inboxVsPlainConsumer: { target: '>= 0.7', met: ratios.inboxVsPlainConsumer >= 0.7 },
      relayVsPgBossOutbox: { target: '> 1', met: ratios.relayVsPgBossOutbox > 1 },
      relayVsNaiveRelay: { target: '> 1', met: ratios.relayVsNaiveRelay > 1 },
    },
  };
}

function charts(r: Record<string, Json>): Record<string, string> {
  const out: Record<string, string> = {};
  const sweep = r['relay-sweep'];
  if (sweep?.sweep?.length) {
    const windows: number[] = [...new Set<number>(sweep.sweep.map((x: Json) => x.maxInFlight))].sort((a, b) => a - b);
    const batches: number[] = [...new Set<number>(sweep.sweep.map((x: Json) => x.batchSize))].sort((a, b) => a - b);
    out['bench-relay-sweep.svg'] = lineChart({
      title: `Relay drain throughput, ${sweep.params.sweepEvents.toLocaleString('en')}-event backlog`,
      xLabel: 'max in flight (--max-in-flight)',
      yLabel: 'events/s',
      categories: windows.map(String),
      series: [
        ...batches.map((b) => ({
          name: `relay, batch ${b}`,
          values: windows.map((w) => sweep.sweep.find((x: Json) => x.batchSize === b && x.maxInFlight === w)?.relayPerSec),
        })),
        { name: 'raw JetStream (ceiling)', values: windows.map((w) => sweep.rawByWindow?.[w]), dashed: true },
      ],
    });
  }
  const load = r['relay-load'];
  if (load?.runs?.length) {
    const loads: number[] = [...new Set<number>(load.runs.map((x: Json) => x.loadPercent))].sort((a, b) => a - b);
    const pick = (listen: boolean, key: string) =>
      loads.map((l) => {
        const run = load.runs.find((x: Json) => x.listen === listen && x.loadPercent === l);
        return run?.sustainable ? Math.max(run[key], 0.01) : undefined;
      });
    out['bench-relay-latency.svg'] = lineChart({
      title: `Commit-to-ack latency vs offered load (capacity ${fmt(load.capacityPerSec)} events/s)`,
      xLabel: 'offered load, % of measured capacity (events/s)',
      yLabel: 'ms',
      logY: true,
      categories: loads.map((l) => `${l}% (${fmt((load.capacityPerSec * l) / 100)})`),
      series: [
        { name: 'LISTEN p50', values: pick(true, 'p50Ms') },
        { name: 'LISTEN p99', values: pick(true, 'p99Ms') },
        { name: 'LISTEN p99.9', values: pick(true, 'p999Ms') },
        { name: 'polling p50', values: pick(false, 'p50Ms'), dashed: true },
        { name: 'polling p99', values: pick(false, 'p99Ms'), dashed: true },
        { name: 'polling p99.9', values: pick(false, 'p999Ms'), dashed: true },
      ],
    });
  }
  const growth = r.growth;
  if (growth?.levels?.length) {
    out['bench-growth.svg'] = lineChart({
      title: 'Relay drain and publish latency vs retained published rows',
      xLabel: 'retained published rows',
      yLabel: 'relative to 0 retained rows',
      categories: growth.levels.map((l: Json) => l.retained.toLocaleString('en')),
      series: [
        {
          name: 'drain events/s',
          values: growth.levels.map((l: Json) => l.drainPerSec.median / growth.levels[0].drainPerSec.median),
        },
        {
          name: 'publish p50',
          values: growth.levels.map((l: Json) => l.publishP50Ms.median / growth.levels[0].publishP50Ms.median),
        },
        {
          name: 'publish p99',
          values: growth.levels.map((l: Json) => l.publishP99Ms.median / growth.levels[0].publishP99Ms.median),
        },
      ],
    });
  }
  return out;
}

/** Writes docs/benchmarks.md laid out as the repository's formatter wants it (`biome ci .` checks docs/). */
function writeMarkdown(file: URL, md: string): void {
  writeFileSync(file, md);
  const biome = new URL('node_modules/.bin/biome', repo);
  if (existsSync(biome)) spawnSync(fileURLToPath(biome), ['format', '--write', fileURLToPath(file)], { stdio: 'ignore' });
}

/** `--render`: docs/benchmarks.md and the charts again from the committed latest.json (after editing analysis.md). */
function render(): number {
  const latest = JSON.parse(readFileSync(new URL('latest.json', results), 'utf8'));
  const docsDir = new URL('docs/', repo);
  const svgs = charts(latest.scenarios);
  for (const [file, svg] of Object.entries(svgs)) writeFileSync(new URL(file, docsDir), svg);
  writeMarkdown(new URL('benchmarks.md', docsDir), renderMarkdown(latest, Object.keys(svgs)));
  console.log(`rendered ${fileURLToPath(new URL('benchmarks.md', docsDir))} and ${Object.keys(svgs).length} chart(s) from latest.json`);
  return 0;
}

async function main(): Promise<number> {
  if (hasFlag('render')) return render();
  const started = performance.now();
  const machine = await describeMachine();
  const selected = SCENARIOS.filter((s) => ONLY.length === 0 || ONLY.includes(s.name));
  const byName: Record<string, Json> = {};
  const runs: Record<string, { code: number; seconds: number; missing: string[] }> = {};
  for (const s of selected) {
    // A result left by an earlier run must not pass for this one.
    rmSync(new URL(`${s.result}.json`, results), { force: true });
    const { code, seconds } = await runScenario(s);
    const r = readResult(s.result);
    byName[s.name] = r;
    runs[s.name] = { code, seconds, missing: code === 0 ? missingNumbers(s.name, r) : ['(the scenario failed)'] };
  }
  const head = headline(byName);
  const totalSeconds = (performance.now() - started) / 1000;
  const latest = {
    ...head,
    run: {
      quick: QUICK,
      only: ONLY.length ? ONLY : undefined,
      at: new Date().toISOString(),
      totalSeconds,
      command: QUICK ? 'npm run bench -- --quick' : 'npm run bench',
      scenarios: runs,
    },
    machine,
    scenarios: byName,
  };

  const pct = (x: number | undefined) => (x === undefined ? 'n/a' : fmt(x));
  printTable(
    `Headline figures (${QUICK ? 'QUICK smoke run: sizes too small to quote' : 'full run'}; ${totalSeconds.toFixed(0)} s)`,
    ['figure', 'value', 'target', 'met'],
    [
      [
        'publisher overhead (plain tx/s / publish tx/s)',
        pct(head.ratios.publishOverhead),
        '<= 1.3',
        head.targets.publishOverhead.met ? 'yes' : 'NO',
      ],
      ['relay drain / raw JetStream', pct(head.ratios.relayVsRawJetStream), '>= 0.8', head.targets.relayVsRawJetStream.met ? 'yes' : 'NO'],
      [
        'inbox / plain consumer (fresh)',
        pct(head.ratios.inboxVsPlainConsumer),
        '>= 0.7',
        head.targets.inboxVsPlainConsumer.met ? 'yes' : 'NO',
      ],
      ['relay / pg-boss outbox (drain)', pct(head.ratios.relayVsPgBossOutbox), '> 1', head.targets.relayVsPgBossOutbox.met ? 'yes' : 'NO'],
      ['relay / naive relay (drain)', pct(head.ratios.relayVsNaiveRelay), '> 1', head.targets.relayVsNaiveRelay.met ? 'yes' : 'NO'],
      ['relay drain events/s', pct(head.relay.eventsPerSec), '', ''],
      [
        'commit-to-ack p50 / p99 / p99.9 ms',
        `${pct(head.relay.commitToAckMs.p50)} / ${pct(head.relay.commitToAckMs.p99)} / ${pct(head.relay.commitToAckMs.p999)}`,
        '',
        '',
      ],
      ['publisher tx/s', pct(head.publisher.txPerSec), '', ''],
      ['inbox events/s (fresh)', pct(head.inbox.eventsPerSec), '', ''],
    ],
  );

  // Full runs write the committed files; smoke and partial runs keep to bench/results/<quick|partial>/.
  const committed = !QUICK && ONLY.length === 0;
  const outDir = committed ? results : new URL(`${QUICK ? 'quick' : 'partial'}/`, results);
  const docsDir = committed ? new URL('docs/', repo) : outDir;
  mkdirSync(outDir, { recursive: true });
  writeFileSync(new URL('latest.json', outDir), `${JSON.stringify(latest, null, 2)}\n`);
  const svgs = charts(byName);
  for (const [file, svg] of Object.entries(svgs)) writeFileSync(new URL(file, docsDir), svg);
  const md = renderMarkdown(latest, Object.keys(svgs));
  writeMarkdown(new URL('benchmarks.md', docsDir), md);
  console.log(
    `\nwrote ${fileURLToPath(new URL('latest.json', outDir))}, ${fileURLToPath(new URL('benchmarks.md', docsDir))} and ${Object.keys(svgs).length} chart(s)`,
  );

  const failed = Object.entries(runs).filter(([, r]) => r.code !== 0 || r.missing.length > 0);
  for (const [name, r] of failed) console.error(`FAILED: ${name}: exit ${r.code}; missing ${r.missing.join(', ')}`);
  return failed.length > 0 ? 1 : 0;
}

process.exitCode = await main();
