/**
 * Command-line flags shared by every bench entry point. Each script declares
 * its flags once, first thing, with `declareFlags`: `--help` prints the usage
 * and exits 0, an undeclared flag or a stray argument exits 2 naming it, before
 * any database or stream is touched. `arg`, `numArg`, `listArg` and `hasFlag`
 * then read the parsed values (and throw on a name the script did not declare).
 */
import { relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

/** Flag name → help text; a text starting with `<` (e.g. `'<n> events to drain'`) takes a value. */
export type FlagSpec = Record<string, string>;

let parsed: { spec: FlagSpec; values: Record<string, string | boolean | undefined> } | undefined;

/** Exits 2 with `message` (bad usage, as the ferry CLI does). */
function usageError(message: string, usage: string): never {
  console.error(`${message}\n\n${usage}`);
  process.exit(2);
}

/** The usage text: the command line, what it does, one line per flag. */
export function usageText(command: string, about: string, spec: FlagSpec): string {
  const all: FlagSpec = { ...spec, help: 'this text' };
  const names = Object.keys(all).map((n) => {
    const help = all[n] ?? '';
    const value = help.startsWith('<') ? ` ${help.slice(0, help.indexOf('>') + 1)}` : '';
    return { flag: `--${n}${value}`, text: value ? help.slice(help.indexOf('>') + 1).trim() : help };
  });
  const width = Math.max(...names.map((n) => n.flag.length));
  return [`usage: ${command} [flags]`, '', about, '', ...names.map((n) => `  ${n.flag.padEnd(width)}  ${n.text}`)].join('\n');
}

/**
 * Parses `argv` (default: this process's arguments) against `spec`. `--help`
 * prints the usage and exits 0; an unknown flag, a missing value or a
 * positional argument exits 2 with a message naming it.
 */
export function declareFlags(command: string, about: string, spec: FlagSpec, argv: string[] = process.argv.slice(2)): void {
  const usage = usageText(command, about, spec);
  const options: Record<string, { type: 'string' | 'boolean' }> = { help: { type: 'boolean' } };
  for (const [name, help] of Object.entries(spec)) options[name] = { type: help.startsWith('<') ? 'string' : 'boolean' };
  let values: Record<string, string | boolean | undefined>;
  try {
    values = parseArgs({ args: argv, options, strict: true, allowPositionals: false }).values as Record<string, string | boolean>;
  } catch (err) {
    // ERR_PARSE_ARGS_UNKNOWN_OPTION, ERR_PARSE_ARGS_INVALID_OPTION_VALUE, ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL: the message names the argument.
    usageError(err instanceof Error ? err.message : String(err), usage);
  }
  if (values.help) {
    console.log(usage);
    process.exit(0);
  }
  parsed = { spec, values };
}

function value(name: string): string | boolean | undefined {
  if (!parsed) throw new Error(`--${name} read before declareFlags() parsed the command line`);
  if (!Object.hasOwn(parsed.spec, name)) throw new Error(`--${name} is not declared by this script's declareFlags()`);
  return parsed.values[name];
}

/** Whether a boolean flag was given. */
export function hasFlag(name: string): boolean {
  return value(name) === true;
}

/** `--name value`, or the fallback. */
export function arg(name: string, fallback: string): string {
  const v = value(name);
  return typeof v === 'string' ? v : fallback;
}

export function numArg(name: string, fallback: number): number {
  const n = Number(arg(name, String(fallback)));
  if (!Number.isFinite(n)) usageError(`--${name} must be a number, got ${JSON.stringify(arg(name, ''))}`, `(see --help)`);
  return n;
}

/** `--name 1,2,3` as numbers. */
export function listArg(name: string, fallback: readonly number[]): number[] {
  const list = arg(name, fallback.join(','))
    .split(',')
    .filter((s) => s !== '')
    .map(Number);
  if (list.some((n) => !Number.isFinite(n)))
    usageError(`--${name} must be numbers separated by commas, got ${JSON.stringify(arg(name, ''))}`, '(see --help)');
  return list;
}

/** `--quick` when the script declared it; false otherwise (for code shared by scripts that do not). */
export function isQuick(): boolean {
  return parsed !== undefined && Object.hasOwn(parsed.spec, 'quick') && parsed.values.quick === true;
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Polls `check` every 10 ms until it holds, or throws after `timeoutMs`. */
export async function until(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 300_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(10);
  }
}

/** A flag with a value: its help (starting with `<n>`, `<s>`, `<n,n,…>`, …), its default, and its default under `--quick`. */
export type ValueFlag = readonly [help: string, full: number | string | readonly number[], quick?: number | string | readonly number[]];

/** A scenario's flags: a string is a boolean flag's help, a `ValueFlag` a flag with a value. */
export type BenchFlagSpec = Record<string, string | ValueFlag>;

type FlagValue<F> = F extends string
  ? boolean
  : F extends readonly [string, infer D, ...unknown[]]
    ? D extends number
      ? number
      : D extends string
        ? string
        : number[]
    : never;

/** What `benchFlags` read: each flag's value, typed by its default (`true`/`false` for a boolean flag). */
export type BenchFlags<S extends BenchFlagSpec> = { readonly [K in keyof S]: FlagValue<S[K]> };

const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));

function defaultText(value: number | string | readonly number[]): string {
  if (typeof value === 'number') return value.toLocaleString('en-US');
  return typeof value === 'string' ? value : value.join(',');
}

/** A flag's help: a flag with a value gets its default appended (none for an empty string). */
function helpOf(flag: string | ValueFlag): string {
  if (typeof flag === 'string') return flag;
  const text = defaultText(flag[1]);
  return text === '' ? flag[0] : `${flag[0]} (default ${text})`;
}

/**
 * A scenario's flags, declared and read in one table, so each default is written once: the help
 * of a flag with a value ends in `(default …)` made from its default, and its value has the
 * default's type (a number, a list of numbers, a string); under `--quick` (when the script
 * declares it) a flag's third entry is its default. The usage line names the script as run.
 *
 * @example
 * const flags = benchFlags('What it measures.', { quick: 'a small run', events: ['<n> events per trial', 20_000, 2000] });
 * flags.events; // a number
 */
export function benchFlags<const S extends BenchFlagSpec>(about: string, spec: S, argv: string[] = process.argv.slice(2)): BenchFlags<S> {
  const help: FlagSpec = {};
  for (const [name, flag] of Object.entries(spec)) help[name] = helpOf(flag);
  declareFlags(`node ${relative(REPO_ROOT, process.argv[1] ?? 'script.js')}`, about, help, argv);
  const quick = isQuick();
  const values: Record<string, unknown> = {};
  for (const [name, flag] of Object.entries(spec)) {
    if (typeof flag === 'string') {
      values[name] = hasFlag(name);
      continue;
    }
    const fallback = quick && flag.length > 2 ? (flag[2] as ValueFlag[1]) : flag[1];
    if (typeof fallback === 'number') values[name] = numArg(name, fallback);
    else if (typeof fallback === 'string') values[name] = arg(name, fallback);
    else values[name] = listArg(name, fallback);
  }
  return values as BenchFlags<S>;
}
