/**
 * The benchmark runner: every scenario in its own child process (one at a
 * time, each with its own schema and streams), then one table of headline
 * figures beside their same-run baselines, `bench/results/latest.json`,
 * `docs/benchmarks.md` and the SVG charts under `docs/`.
 *
 *   npm run bench                 the full run (about an hour on 2 cores, 30 minutes of it the soak)
 *   npm run bench -- --quick      the smoke run (about 2 minutes): checks that every scenario
 *                                 produced numbers (never thresholds) and writes its output
 *                                 under bench/results/quick/, leaving the committed results alone
 *   npm run bench -- --only relay-drain,relay-latency   some scenarios (output under bench/results/partial/)
 *   npm run bench -- --render     docs/benchmarks.md, the charts and README's figures again from
 *                                 bench/results/latest.json
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { fileURLToPath } from 'node:url';
import { natsUrl } from '@ferry/testkit';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';
import { arg, declareFlags, hasFlag } from './lib/args.js';
import { missingNumbers } from './lib/checks.js';
import { formatFigure, headlineFigures, metText } from './lib/headline.js';
import { README_START, renderMarkdown, replaceReadmeBlock } from './lib/report.js';
import { fmt, printTable } from './lib/stats.js';
import { lineChart } from './lib/svg.js';

declareFlags(
  'npm run bench -- (or node bench/dist/run.js)',
  "Every scenario in its own child process, then the headline ratios beside their targets, bench/results/latest.json, docs/benchmarks.md, the charts and README's figures. A full run takes about an hour on 2 cores, 30 minutes of it the soak: run it on a quiet machine.",
  {
    quick: 'the smoke run: small sizes, checks every scenario produced its numbers; output under bench/results/quick/',
    only:
      '<a,b,…> run only these scenarios (output under bench/results/partial/): ' +
      'publisher, relay-drain, relay-latency, inbox, alternatives, growth, blocked-key, relay-sweep, relay-load, contract-cost, soak',
    render: "write docs/benchmarks.md, the charts and README's figures again from bench/results/latest.json, run nothing",
  },
);

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
    name: 'publish-function-cost',
    title: '1b. Publisher CPU against the bare statement of the same writes',
    script: 'scenarios/publish-function-cost.js',
    result: 'publish-function-cost',
    quick: ['--trials', '1', '--seconds', '1'],
    full: ['--trials', '5', '--seconds', '3'],
  },
  {
    name: 'relay-drain',
    title: '2. Relay drain: ferry relay (defaults) vs raw JetStream, by key spread and storage, with CPU',
    script: 'scenarios/relay-drain.js',
    result: 'relay-drain',
    quick: ['--quick'],
    full: [],
  },
  {
    name: 'relay-latency',
    title: '3. Commit → subscriber latency with the defaults a user gets',
    script: 'scenarios/relay-latency.js',
    result: 'relay-latency',
    quick: ['--quick'],
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
    title: '5. The alternatives: pg-boss, pg-transactional-outbox, a naive relay',
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
    title: "7. A blocked hot key: claim cost and the other keys' drain",
    script: 'scenarios/blocked-key.js',
    result: 'blocked-key',
    quick: ['--quick'],
    full: [],
  },
  {
    name: 'relay-sweep',
    title: '8. Tuning: the batch x in-flight sweep',
    script: 'scenarios/relay-sweep.js',
    result: 'relay-sweep',
    quick: ['--quick'],
    full: [],
  },
  {
    name: 'relay-load',
    title: '9. Latency against offered load (relay in process, LISTEN and polling)',
    script: 'scenarios/relay-load.js',
    result: 'relay-load',
    quick: ['--quick', '--seconds', '1'],
    full: [],
  },
  {
    name: 'contract-cost',
    title: '10. Event contracts: the CPU of a checked publish and inbox message (valibot, zod) against the plain path',
    script: 'scenarios/contract-cost.js',
    result: 'contract-cost',
    quick: ['--quick'],
    full: [],
  },
  {
    name: 'soak',
    title: '11. Soak: half the capacity for 30 minutes, retention pruned every minute',
    script: 'scenarios/soak.js',
    result: 'soak',
    quick: ['--quick'],
    full: [],
  },
];

const dist = new URL('./', import.meta.url);
const results = new URL('../results/', import.meta.url);
const repo = new URL('../../', import.meta.url);

// Full runs write the committed files; smoke and partial runs keep to bench/results/<quick|partial>/.
const COMMITTED = !QUICK && ONLY.length === 0;
const OUT_DIR = COMMITTED ? results : new URL(`${QUICK ? 'quick' : 'partial'}/`, results);

/** How many of a scenario's last stderr lines a failure quotes in the summary (the CI log shows only its tail). */
const STDERR_TAIL_LINES = 12;

function runScenario(s: ScenarioSpec): Promise<{ code: number; seconds: number; stderrTail: string[] }> {
  const args = QUICK ? s.quick : s.full;
  console.log(`\n=== ${s.title}: node bench/dist/${s.script} ${args.join(' ')}`);
  const started = performance.now();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [fileURLToPath(new URL(s.script, dist)), ...args], {
      stdio: ['inherit', 'inherit', 'pipe'],
      // Where the scenario writes its result (bench/lib/stats.ts writeResult).
      env: { ...process.env, FERRY_BENCH_RESULTS_DIR: fileURLToPath(OUT_DIR) },
    });
    // stderr is passed through as it comes and its tail kept, so a failure's cause reaches the summary.
    let tail = '';
    child.stderr.on('data', (chunk: Buffer) => {
      process.stderr.write(chunk);
      tail = (tail + chunk.toString('utf8')).slice(-8_192);
    });
    child.on('close', (code, signal) =>
      resolve({
        code: code ?? (signal ? 1 : 0),
        seconds: (performance.now() - started) / 1000,
        stderrTail: tail
          .split('\n')
          .filter((l) => l.trim() !== '')
          .slice(-STDERR_TAIL_LINES),
      }),
    );
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
  const file = new URL(`${name}.json`, OUT_DIR);
  if (!existsSync(file)) return undefined;
  return JSON.parse(readFileSync(file, 'utf8'));
}

/** The figures the issue asks for, each beside the baseline it is divided by; plus the absolute rates for context. */
function headline(r: Record<string, Json>) {
  const figures = headlineFigures(r);
  const drain = r['relay-drain']?.headline;
  const pub = r.publisher;
  return {
    figures,
    ratios: Object.fromEntries(figures.map((f) => [f.id, f.value])),
    relay: {
      eventsPerSec: drain?.relayEventsPerSec,
      rawEventsPerSec: drain?.rawEventsPerSec,
      atKeys: drain?.atKeys,
      cpuMsPer1k: { relay: drain?.relayCpuMsPer1k, postgres: drain?.postgresCpuMsPer1k, raw: drain?.rawCpuMsPer1k },
    },
    publisher: { txPerSec: pub?.txPerSec, writers: 8 },
    inbox: { eventsPerSec: r.inbox?.results?.fresh?.inbox?.median },
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
  const soak = r.soak;
  if (soak?.perMinute?.length) {
    const minutes = soak.perMinute.map((m: Json) => String(m.minute));
    out['bench-soak-latency.svg'] = lineChart({
      title: `Soak: commit → applied latency at ${fmt(soak.ratePerSec)} events/s`,
      xLabel: 'minute',
      yLabel: 'ms',
      categories: minutes,
      series: [
        { name: 'p50', values: soak.perMinute.map((m: Json) => m.p50Ms) },
        { name: 'p99', values: soak.perMinute.map((m: Json) => m.p99Ms) },
      ],
    });
    out['bench-soak-size.svg'] = lineChart({
      title: 'Soak: Ferry tables and indexes, and dead tuples',
      xLabel: 'minute',
      yLabel: 'MiB / thousands',
      categories: minutes,
      series: [
        { name: 'tables + indexes, MiB', values: soak.perMinute.map((m: Json) => m.totalBytes / 2 ** 20) },
        { name: 'dead tuples, thousands', values: soak.perMinute.map((m: Json) => m.deadTuples / 1000), dashed: true },
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

/** README.md's benchmark block (between its markers) from `latest`; formatted as `biome ci .` wants it. */
function writeReadme(latest: Json): void {
  const file = new URL('README.md', repo);
  const before = readFileSync(file, 'utf8');
  const after = replaceReadmeBlock(before, latest);
  if (after === before && !before.includes(README_START)) {
    console.error('README.md has no benchmark block (README_START ... README_END markers): its figures were not updated');
    return;
  }
  writeMarkdown(file, after);
}

/** `--render`: docs/benchmarks.md, the charts and README's figures again from the committed latest.json (after editing analysis.md). */
function render(): number {
  const latest = JSON.parse(readFileSync(new URL('latest.json', results), 'utf8'));
  const docsDir = new URL('docs/', repo);
  const svgs = charts(latest.scenarios);
  for (const [file, svg] of Object.entries(svgs)) writeFileSync(new URL(file, docsDir), svg);
  writeMarkdown(new URL('benchmarks.md', docsDir), renderMarkdown(latest, Object.keys(svgs)));
  writeReadme(latest);
  console.log(
    `rendered ${fileURLToPath(new URL('benchmarks.md', docsDir))}, README.md's figures and ${Object.keys(svgs).length} chart(s) from latest.json`,
  );
  return 0;
}

async function main(): Promise<number> {
  if (hasFlag('render')) return render();
  const started = performance.now();
  const machine = await describeMachine();
  const unknown = ONLY.filter((name) => !SCENARIOS.some((s) => s.name === name));
  if (unknown.length > 0) {
    console.error(`--only: no scenario named ${unknown.join(', ')}; the scenarios: ${SCENARIOS.map((s) => s.name).join(', ')}`);
    return 2;
  }
  const selected = SCENARIOS.filter((s) => ONLY.length === 0 || ONLY.includes(s.name));
  const byName: Record<string, Json> = {};
  const runs: Record<string, { code: number; seconds: number; missing: string[]; stderrTail?: string[]; firstTryFailed?: string[] }> = {};
  for (const s of selected) {
    // A result left by an earlier run must not pass for this one.
    rmSync(new URL(`${s.result}.json`, OUT_DIR), { force: true });
    let run = await runScenario(s);
    let firstFailure: string[] | undefined;
    if (run.code !== 0 && QUICK) {
      // The smoke run checks that every scenario still produces numbers, on a machine the test suite
      // has just loaded; one more try tells a scenario that is broken from one that lost a race with
      // the load. Both tries' causes are kept in latest.json and the first is printed, so nothing is hidden.
      firstFailure = run.stderrTail;
      console.error(`\n${s.name} failed (exit ${run.code}); its last stderr lines:\n  ${run.stderrTail.join('\n  ')}\ntrying it once more`);
      rmSync(new URL(`${s.result}.json`, OUT_DIR), { force: true });
      run = await runScenario(s);
    }
    const { code, seconds, stderrTail } = run;
    const r = readResult(s.result);
    byName[s.name] = r;
    runs[s.name] = {
      code,
      seconds,
      missing: code === 0 ? missingNumbers(s.name, r) : ['(the scenario failed)'],
      ...(code !== 0 ? { stderrTail } : {}),
      ...(firstFailure ? { firstTryFailed: firstFailure } : {}),
    };
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

  printTable(
    `Headline figures (${QUICK ? 'QUICK smoke run: sizes too small to quote' : 'full run'}; ${totalSeconds.toFixed(0)} s)`,
    ['figure', 'value', 'target', ''],
    head.figures.map((f) => [f.figure, formatFigure(f), f.target, metText(f)]),
  );

  const outDir = OUT_DIR;
  const docsDir = COMMITTED ? new URL('docs/', repo) : outDir;
  mkdirSync(outDir, { recursive: true });
  writeFileSync(new URL('latest.json', outDir), `${JSON.stringify(latest, null, 2)}\n`);
  const svgs = charts(byName);
  for (const [file, svg] of Object.entries(svgs)) writeFileSync(new URL(file, docsDir), svg);
  const md = renderMarkdown(latest, Object.keys(svgs));
  writeMarkdown(new URL('benchmarks.md', docsDir), md);
  if (COMMITTED) writeReadme(latest);
  console.log(
    `\nwrote ${fileURLToPath(new URL('latest.json', outDir))}, ${fileURLToPath(new URL('benchmarks.md', docsDir))} and ${Object.keys(svgs).length} chart(s)`,
  );

  const failed = Object.entries(runs).filter(([, r]) => r.code !== 0 || r.missing.length > 0);
  for (const [name, r] of Object.entries(runs)) {
    if (r.firstTryFailed && r.code === 0)
      console.error(`RETRIED: ${name} failed once, then passed; the first try's cause:\n  ${r.firstTryFailed.join('\n  ')}`);
  }
  for (const [name, r] of failed) {
    console.error(`FAILED: ${name}: exit ${r.code}; missing ${r.missing.join(', ')}`);
    if (r.stderrTail?.length) console.error(`  ${r.stderrTail.join('\n  ')}`);
  }
  return failed.length > 0 ? 1 : 0;
}

process.exitCode = await main();
