import type { ContractRegistry } from '@ferry/contracts';
import { ConfigError } from '@ferry/core';
import { contractJsonSchema, isJsonObject, type JsonObject, own } from './json-schema.js';

/** The format marker of a snapshot file; a later format gets a new number. */
export const SNAPSHOT_FORMAT = 'ferry.contracts.snapshot/1';

/** One contract as a snapshot records it. */
export interface SnapshotContract {
  readonly type: string;
  readonly version: number;
  readonly subject: string | null;
  readonly dataschema: string;
  readonly description: string | null;
  /** The JSON Schema (draft 2020-12) of `data`, keys sorted. */
  readonly jsonSchema: JsonObject;
}

/** What `ferry contracts snapshot` writes: every contract, by type then version. */
export interface Snapshot {
  readonly $comment: string;
  readonly format: typeof SNAPSHOT_FORMAT;
  readonly contracts: readonly SnapshotContract[];
}

const COMMENT =
  'Written by `ferry contracts snapshot`; `ferry contracts check --against` this file refuses a breaking change. Do not edit.';

/** Code-unit order: the same on every machine, whatever its locale. */
export function byText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Every contract of `registry` with its JSON Schema, sorted by type then version. Throws for a contract that has none. */
export function buildSnapshot(registry: ContractRegistry): Snapshot {
  const contracts: SnapshotContract[] = [];
  for (const type of [...registry.types()].sort(byText)) {
    for (const c of registry.versions(type)) {
      contracts.push({
        type: c.type,
        version: c.version,
        subject: c.subject ?? null,
        dataschema: registry.dataschema(c),
        description: c.description ?? null,
        jsonSchema: contractJsonSchema(c),
      });
    }
  }
  return { $comment: COMMENT, format: SNAPSHOT_FORMAT, contracts };
}

/** The snapshot as its file holds it: two-space JSON, a newline at the end. */
export function formatSnapshot(snapshot: Snapshot): string {
  return `${JSON.stringify(snapshot, null, 2)}\n`;
}

/** A snapshot file's text, checked; a file that is not one is a `ConfigError` (exit 2) naming it and the command that writes one. */
export function parseSnapshot(text: string, file: string): Snapshot {
  const bad = (why: string): never => {
    throw new ConfigError(
      '--against',
      `--against ${JSON.stringify(file)}: ${why}; expected a file written by ferry contracts snapshot --registry … --out ${file}`,
    );
  };
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    bad(`not JSON (${err instanceof Error ? err.message : String(err)})`);
  }
  if (!isJsonObject(parsed) || own(parsed, 'format') !== SNAPSHOT_FORMAT) bad(`no "format": "${SNAPSHOT_FORMAT}"`);
  const list = own(parsed as JsonObject, 'contracts');
  if (!Array.isArray(list)) return bad('no "contracts" array');
  const seen = new Set<string>();
  const contracts = list.map((entry, i): SnapshotContract => {
    if (!isJsonObject(entry)) return bad(`contracts[${i}] is not an object`);
    const type = own(entry, 'type');
    const version = own(entry, 'version');
    const dataschema = own(entry, 'dataschema');
    const jsonSchema = own(entry, 'jsonSchema');
    const subject = own(entry, 'subject') ?? null;
    const description = own(entry, 'description') ?? null;
    if (typeof type !== 'string' || type.length === 0) return bad(`contracts[${i}].type is not a type name`);
    if (typeof version !== 'number' || !Number.isSafeInteger(version) || version < 1) return bad(`contracts[${i}].version is not 1, 2, 3…`);
    if (typeof dataschema !== 'string') return bad(`contracts[${i}].dataschema is not a string`);
    if (!isJsonObject(jsonSchema)) return bad(`contracts[${i}].jsonSchema is not a JSON Schema object`);
    if (subject !== null && typeof subject !== 'string') return bad(`contracts[${i}].subject is not a string`);
    if (description !== null && typeof description !== 'string') return bad(`contracts[${i}].description is not a string`);
    const id = `${type}\u0000${version}`;
    if (seen.has(id)) bad(`${JSON.stringify(type)} v${version} is in it twice`);
    seen.add(id);
    return { type, version, subject, dataschema, description, jsonSchema };
  });
  return { $comment: COMMENT, format: SNAPSHOT_FORMAT, contracts };
}
