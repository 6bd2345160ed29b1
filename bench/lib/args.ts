/** Small command-line helpers shared by the scenarios and the runner. */

/** `--name value`, or the fallback. */
export function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? (process.argv[i + 1] ?? fallback) : fallback;
}

export function numArg(name: string, fallback: number): number {
  const n = Number(arg(name, String(fallback)));
  if (!Number.isFinite(n)) throw new Error(`--${name} must be a number`);
  return n;
}

/** `--name 1,2,3` as numbers. */
export function listArg(name: string, fallback: readonly number[]): number[] {
  return arg(name, fallback.join(','))
    .split(',')
    .filter((s) => s !== '')
    .map(Number);
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
