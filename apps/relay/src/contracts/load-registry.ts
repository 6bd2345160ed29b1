import { stat } from 'node:fs/promises';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { type ContractRegistry, isContractRegistry } from '@ferry/contracts';
import { ConfigError } from '@ferry/core';

/** What a registry module must export, as every refusal says it. */
export const REGISTRY_EXPECTED = 'a module whose default export is a registry: export default defineContracts([...])';

/** A registry module and the registry it exports. */
export interface LoadedRegistry {
  /** The path as the operator gave it (for messages and the fix commands printed). */
  readonly given: string;
  /** The absolute path that was imported. */
  readonly path: string;
  readonly registry: ContractRegistry;
}

function refuse(given: string, why: string, cause?: unknown): never {
  throw new ConfigError('--registry', `--registry ${JSON.stringify(given)}: ${why}; expected ${REGISTRY_EXPECTED}`, { cause });
}

function firstLine(err: unknown): string {
  const text = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  return (text.split('\n')[0] ?? '').slice(0, 300);
}

/**
 * Import the registry module `given` (relative to `cwd`). The registry is its
 * default export, else its `contracts` export, else its one export that is a
 * registry. A module that is missing, does not load or exports none is a
 * `ConfigError` (exit 2) naming the file and what was expected.
 */
export async function loadRegistry(given: string, cwd: string): Promise<LoadedRegistry> {
  const path = resolve(cwd, given);
  const info = await stat(path).catch(() => undefined);
  if (!info) refuse(given, `no such file (${path})`);
  if (!info.isFile()) refuse(given, `${path} is not a file`);
  let mod: Record<string, unknown>;
  try {
    mod = (await import(pathToFileURL(path).href)) as Record<string, unknown>;
  } catch (err) {
    const hint = /\.[cm]?ts$/.test(path) ? ' (give the built .js file: npx tsc, then dist/…)' : '';
    refuse(given, `it did not load: ${firstLine(err)}${hint}`, err);
  }
  // A module namespace has no prototype to pollute; still, only its own names are read.
  const read = (name: string) => (Object.hasOwn(mod, name) ? mod[name] : undefined);
  const byDefault = read('default');
  if (isContractRegistry(byDefault)) return { given, path, registry: byDefault };
  const named = read('contracts');
  if (isContractRegistry(named)) return { given, path, registry: named };
  const found = Object.keys(mod).filter((name) => isContractRegistry(read(name)));
  const only = found.length === 1 && found[0] !== undefined ? read(found[0]) : undefined;
  if (isContractRegistry(only)) return { given, path, registry: only };
  if (found.length > 1) {
    refuse(given, `it exports ${found.length} registries (${found.join(', ')}) and none as default or as "contracts"`);
  }
  const names = Object.keys(mod);
  refuse(given, `it exports no registry (its exports: ${names.length > 0 ? names.slice(0, 10).join(', ') : 'none'})`);
}
