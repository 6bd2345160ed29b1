import { main } from '@ferry/relay';

export interface FerryRun {
  code: number;
  out: string;
  err: string;
  /** stdout parsed as JSON (throws when it is not JSON). */
  json<T = Record<string, unknown>>(): T;
}

/** Runs `ferry <args>` in this process, capturing its output; `env` is the command's environment. */
export async function ferry(args: string[], env: NodeJS.ProcessEnv = {}): Promise<FerryRun> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(['node', 'ferry', ...args], { out: (l) => out.push(l), err: (l) => err.push(l), env });
  const o = out.join('\n');
  return { code, out: o, err: err.join('\n'), json: <T>() => JSON.parse(o) as T };
}
