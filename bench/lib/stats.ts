import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { isQuick } from './args.js';

/** Median and spread (min..max, and relative half-range) of repeated trials. */
export interface Summary {
  median: number;
  min: number;
  max: number;
  /** (max - min) / 2 / median: how far apart the trials were. */
  spread: number;
  trials: number[];
}

export function summarize(trials: number[]): Summary {
  const sorted = [...trials].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  const median = sorted.length % 2 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
  const min = sorted[0] ?? 0;
  const max = sorted.at(-1) ?? 0;
  return { median, min, max, spread: median ? (max - min) / 2 / median : 0, trials };
}

export function percentile(sortedValues: number[], p: number): number {
  if (sortedValues.length === 0) return Number.NaN;
  const i = Math.min(sortedValues.length - 1, Math.max(0, Math.ceil((p / 100) * sortedValues.length) - 1));
  return sortedValues[i] as number;
}

export function machine() {
  return {
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model ?? 'unknown',
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    node: process.version,
  };
}

/**
 * Summarizes each variant's samples and prints them as a table: the variant (`label`), its median
 * (`figure`, with `digits` decimals) and its spread. Returns the summaries, for `writeResult`.
 */
export function printMedians(
  title: string,
  [label, figure]: readonly [string, string],
  samples: Record<string, number[]>,
  digits = 2,
): Record<string, Summary> {
  const results = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, summarize(v)]));
  printTable(
    title,
    [label, figure, 'spread'],
    Object.entries(results).map(([k, r]) => [k, r.median.toFixed(digits), `±${(r.spread * 100).toFixed(0)}%`]),
  );
  return results;
}

/** Prints a fixed-width table. */
export function printTable(title: string, header: string[], rows: Array<Array<string | number>>): void {
  const cells = [header, ...rows.map((r) => r.map((c) => (typeof c === 'number' ? fmt(c) : c)))];
  const widths = header.map((_, i) => Math.max(...cells.map((r) => String(r[i] ?? '').length)));
  console.log(`\n${title}`);
  for (const [n, r] of cells.entries()) {
    console.log(r.map((c, i) => String(c).padEnd(widths[i] ?? 0)).join('  '));
    if (n === 0) console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  }
}

export function fmt(n: number): string {
  if (!Number.isFinite(n)) return String(n);
  if (Math.abs(n) >= 100) return n.toFixed(0);
  if (Math.abs(n) >= 10) return n.toFixed(1);
  return n.toFixed(2);
}

/**
 * Where a scenario writes its result: the committed bench/results/ for a full
 * run; bench/results/quick/ for `--quick` (both gitignored sub-folders), or the
 * folder the runner names in FERRY_BENCH_RESULTS_DIR (`--quick`, `--only`), so
 * a smoke or partial run never overwrites the committed figures.
 */
export function resultsDir(): URL {
  const fromRunner = process.env.FERRY_BENCH_RESULTS_DIR;
  if (fromRunner) return pathToFileURL(fromRunner.endsWith('/') ? fromRunner : `${fromRunner}/`);
  return new URL(isQuick() ? '../../results/quick/' : '../../results/', import.meta.url);
}

export function writeResult(name: string, data: unknown): string {
  const dir = resultsDir();
  mkdirSync(dir, { recursive: true });
  const file = new URL(`${name}.json`, dir);
  writeFileSync(file, `${JSON.stringify({ ...(data as object), machine: machine(), at: new Date().toISOString() }, null, 2)}\n`);
  return fileURLToPath(file);
}
