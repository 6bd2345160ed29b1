/**
 * Command-line flags shared by every bench entry point. Each script declares
 * its flags once, first thing, with `declareFlags`: `--help` prints the usage
 * and exits 0, an undeclared flag or a stray argument exits 2 naming it, before
 * any database or stream is touched. `arg`, `numArg`, `listArg` and `hasFlag`
 * then read the parsed values (and throw on a name the script did not declare).
 */
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
