import type { AnyContract } from '@ferry/contracts';
import { CommandFailedError } from '../errors.js';

/** A JSON value as `JSON.parse` returns it. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

/** The JSON Schema dialect every snapshot holds. */
export const JSON_SCHEMA_TARGET = 'draft-2020-12';

export function isJsonObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** `obj[key]` when `key` is its own: `__proto__` or `constructor` never reach a prototype. */
export function own(obj: JsonObject, key: string): Json | undefined {
  return Object.hasOwn(obj, key) ? obj[key] : undefined;
}

/** Define `key` on `obj` as a plain data property, whatever the name (an assignment to `__proto__` would set a prototype). */
export function setOwn(obj: JsonObject, key: string, value: Json): void {
  Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true });
}

/**
 * `value` as plain JSON with every object's keys sorted, so one schema always
 * serializes to the same text. Functions, symbols and `undefined` are left out
 * as JSON.stringify would; a cycle is an error (a schema export never has one).
 */
export function canonicalJson(value: unknown, seen: Set<object> = new Set()): Json {
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return value;
  if (typeof value === 'number') return Number.isFinite(value) ? value : null;
  if (typeof value !== 'object') return null;
  if (seen.has(value)) throw new TypeError('the JSON Schema has a cycle');
  seen.add(value);
  try {
    if (Array.isArray(value)) return value.map((v) => canonicalJson(v, seen));
    const out: JsonObject = {};
    for (const key of Object.keys(value).sort()) {
      const v = (value as Record<string, unknown>)[key];
      if (v === undefined || typeof v === 'function' || typeof v === 'symbol') continue;
      setOwn(out, key, canonicalJson(v, seen));
    }
    return out;
  } finally {
    seen.delete(value);
  }
}

/** `a` and `b` are the same JSON (object key order aside). */
export function sameJson(a: Json | undefined, b: Json | undefined): boolean {
  if (a === b) return true;
  if (a === undefined || b === undefined || a === null || b === null || typeof a !== 'object' || typeof b !== 'object') return false;
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((v, i) => sameJson(v, b[i]));
  }
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => Object.hasOwn(b, k) && sameJson(a[k], b[k]));
}

const FIX = (c: AnyContract) =>
  `give defineEvent({ type: ${JSON.stringify(c.type)}, version: ${c.version}, … }) a jsonSchema, e.g. jsonSchema: toJsonSchema(schema) from @valibot/to-json-schema for valibot, or use a validator that exports one (zod ≥ 4, arktype ≥ 2.1)`;

/**
 * The JSON Schema (draft 2020-12) of a contract's `data`: its `jsonSchema` if
 * the app gave one, else the validator's Standard JSON Schema export
 * (`~standard.jsonSchema.input`). A validator with no export, or one that
 * cannot express this schema (a Date, a transform), is a `CommandFailedError`
 * naming the type, the version and the fix.
 */
export function contractJsonSchema(contract: AnyContract): JsonObject {
  const where = `${JSON.stringify(contract.type)} v${contract.version}`;
  let raw: unknown = contract.jsonSchema;
  if (raw === undefined) {
    const standard = contract.schema['~standard'] as { vendor?: unknown; jsonSchema?: { input?: unknown } };
    const input = standard.jsonSchema?.input;
    if (typeof input !== 'function') {
      throw new CommandFailedError(
        `${where}: its validator (${String(standard.vendor ?? 'unknown')}) exports no JSON Schema (no "~standard".jsonSchema), so its shape cannot be snapshotted or checked; ${FIX(contract)}`,
      );
    }
    try {
      raw = (input as (o: { target: string }) => unknown).call(standard.jsonSchema, { target: JSON_SCHEMA_TARGET });
    } catch (err) {
      throw new CommandFailedError(
        `${where}: its validator cannot export this schema as JSON Schema (${err instanceof Error ? err.message : String(err)}); ${FIX(contract)}`,
        { cause: err },
      );
    }
  }
  let schema: Json;
  try {
    schema = canonicalJson(raw);
  } catch (err) {
    throw new CommandFailedError(`${where}: its JSON Schema is not JSON (${err instanceof Error ? err.message : String(err)})`);
  }
  if (!isJsonObject(schema)) {
    throw new CommandFailedError(`${where}: its JSON Schema is ${JSON.stringify(schema)}, not an object; ${FIX(contract)}`);
  }
  return schema;
}
