import { describeValue, JSON_CONTENT_TYPE, ValidationError } from '@ferry/core';

const CONTENT_TYPE = /^[a-z0-9][a-z0-9!#$&^_.+-]*\/[a-z0-9][a-z0-9!#$&^_.+-]*(\s*;.*)?$/i;

/**
 * The bytes of a binary `data`: any ArrayBuffer view (Uint8Array and Buffer,
 * the other typed arrays, DataView: their bytes as laid out in memory) or an
 * ArrayBuffer/SharedArrayBuffer; `undefined` when `data` is not binary.
 */
function bytesOf(data: unknown): Buffer | undefined {
  if (ArrayBuffer.isView(data)) return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  if (data instanceof ArrayBuffer || (typeof SharedArrayBuffer !== 'undefined' && data instanceof SharedArrayBuffer)) {
    return Buffer.from(data);
  }
  return undefined;
}

const PLAIN_PROTOTYPES: ReadonlySet<unknown> = new Set([Object.prototype, Array.prototype, null]);
/** Classes whose content JSON.stringify drops: each becomes `{}`. */
const LOSSY_CLASSES: ReadonlyArray<abstract new (...args: never[]) => unknown> = [Map, Set, WeakMap, WeakSet, RegExp, Error, Promise];

/**
 * What JSON.stringify would change without a word, inside `data`: a Map, Set,
 * RegExp, Error, Promise or a class instance with no own fields becomes `{}`,
 * nested bytes become `{"0":…}`, NaN and Infinity become null, functions and
 * symbols vanish. Returns a description of the value, or undefined.
 */
function mangledByJson(value: unknown): string | undefined {
  switch (typeof value) {
    case 'number':
      return Number.isFinite(value) ? undefined : String(value);
    case 'function':
      return 'a function';
    case 'symbol':
      return 'a symbol';
    case 'object': {
      // JSON.stringify has already applied toJSON (Date, Buffer): what arrives here is what it would write.
      if (value === null) return undefined;
      const proto = Object.getPrototypeOf(value);
      if (PLAIN_PROTOTYPES.has(proto)) return undefined;
      const name = (proto as { constructor?: { name?: string } } | null)?.constructor?.name || 'class instance';
      if (LOSSY_CLASSES.some((c) => value instanceof c)) return `a ${name}`;
      if (value instanceof Number || value instanceof String || value instanceof Boolean) return undefined;
      // A class instance keeps its own enumerable fields; one with none (only getters, private fields) becomes {}.
      return Object.keys(value).length === 0 ? `a ${name} with no own enumerable fields` : undefined;
    }
    default:
      return undefined;
  }
}

/** Thrown by `throwIfMangled` at the first value JSON would mangle. */
const MANGLED = new Error('mangled');

/** A JSON.stringify replacer that returns every value as it is and throws MANGLED where `stringifyNamingTheCulprit` would name one. */
function throwIfMangled(key: string, value: unknown): unknown {
  if (mangledByJson(value) !== undefined || (key !== '' && typeof value === 'object' && value !== null && bytesOf(value) !== undefined)) {
    throw MANGLED;
  }
  return value;
}

/**
 * JSON.stringify that refuses what it would silently change, naming the value
 * by its path (`event.data.lines.0.when`): a ValidationError, as is any error
 * JSON.stringify throws itself (a bigint, a cycle).
 */
function stringifyNamingTheCulprit(data: unknown, field: string): string | undefined {
  // The path of each object being serialised, to name the value JSON would mangle.
  const paths = new WeakMap<object, string>();
  try {
    return JSON.stringify(data, function (this: object, key: string, value: unknown) {
      const path = key === '' && paths.get(this) === undefined ? `${field}.data` : `${paths.get(this) ?? `${field}.data`}.${key}`;
      const mangled = mangledByJson(value) ?? (bytesOf(value) !== undefined && key !== '' ? 'bytes' : undefined);
      if (mangled !== undefined) {
        throw new ValidationError(
          path,
          `${path} is ${mangled}, which JSON would not keep (${bytesOf(value) !== undefined ? 'it becomes {"0":…}' : 'it becomes {}, null or nothing'}); convert it first (a Map with Object.fromEntries, a Set with [...set], bytes to base64), or pass the whole data as bytes with a contentType`,
        );
      }
      if (typeof value === 'object' && value !== null) paths.set(value, path);
      return value;
    });
  } catch (err) {
    if (err instanceof ValidationError) throw err;
    throw new ValidationError(
      `${field}.data`,
      `${field}.data is not JSON-serialisable (${(err as Error).message}); convert it first, e.g. bigint to string`,
      {
        cause: err,
      },
    );
  }
}

/**
 * An event's `data` as the bytes stored in the outbox and its content type:
 * binary types as they are (contentType required), anything else as JSON,
 * refusing what JSON.stringify would silently change. Throws ValidationError.
 */
export function encodeData(data: unknown, contentType: unknown, field: string): { bytes: Buffer; contentType: string } {
  if (contentType !== undefined && (typeof contentType !== 'string' || !CONTENT_TYPE.test(contentType))) {
    throw new ValidationError(
      `${field}.contentType`,
      `${field}.contentType ${describeValue(contentType)} is not a MIME type such as "application/json"`,
    );
  }
  const bytes = bytesOf(data);
  if (bytes !== undefined) {
    if (contentType === undefined) {
      throw new ValidationError(`${field}.contentType`, `${field}.data is bytes: give contentType too, e.g. "application/octet-stream"`);
    }
    return { bytes, contentType: contentType as string };
  }
  let text: string | undefined;
  try {
    // The common case: nothing to refuse, so no paths to keep (building a path string and a
    // WeakMap entry for every value was most of a publish's Node time).
    text = JSON.stringify(data, throwIfMangled);
  } catch {
    // Something to refuse, or to wrap: the pass below says exactly what and where. It runs the
    // data's getters and toJSON methods a second time; only data that is refused pays that.
    text = stringifyNamingTheCulprit(data, field);
  }
  if (text === undefined) {
    throw new ValidationError(
      `${field}.data`,
      `${field}.data is ${describeValue(data)}, which has no JSON form; pass an object, array, string, number, boolean or null`,
    );
  }
  return { bytes: Buffer.from(text, 'utf8'), contentType: (contentType as string | undefined) ?? JSON_CONTENT_TYPE };
}
