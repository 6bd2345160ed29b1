import { createHash, type Hash } from 'node:crypto';
import { describeValue, ValidationError } from '@ferry/core';
import type { RequestFingerprint } from './types.js';

/**
 * Canonical JSON of a parsed body: object keys sorted, `undefined` members
 * dropped, so the same value always hashes the same however its keys were
 * ordered. Bytes have no JSON form here: a `Uint8Array` is fingerprinted as
 * the whole body (exactly, beside a tag that says "bytes"), never inside a
 * JSON value, where any encoding of it (fingerprint v1 used
 * `{"$bytes": base64}`) could be forged by a JSON body spelling it out.
 */
export function canonicalJson(value: unknown, path = 'body', depth = 0): string {
  if (depth > 64) throw new ValidationError(path, `${path} is nested more than 64 levels deep`);
  if (value === null) return 'null';
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return JSON.stringify(value);
    case 'number':
      if (!Number.isFinite(value)) throw new ValidationError(path, `${path} is ${value}, which has no JSON form`);
      return JSON.stringify(value);
    case 'object': {
      if (value instanceof Uint8Array) {
        throw new ValidationError(
          path,
          `${path} holds bytes inside a JSON value; pass raw bytes only as the whole body (fingerprint.body), or encode them yourself`,
        );
      }
      if (value instanceof Date) return JSON.stringify(value.toISOString());
      if (Array.isArray(value))
        return `[${value.map((v, i) => (v === undefined ? 'null' : canonicalJson(v, `${path}[${i}]`, depth + 1))).join(',')}]`;
      const entries = Object.entries(value as Record<string, unknown>)
        .filter(([, v]) => v !== undefined)
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
      return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v, `${path}.${k}`, depth + 1)}`).join(',')}}`;
    }
    default:
      throw new ValidationError(
        path,
        `${path} contains ${describeValue(value)} (${typeof value}), which cannot be fingerprinted; pass JSON values or bytes`,
      );
  }
}

/** Names this encoding; a new encoding gets a new tag, so two versions never compare equal by accident. */
const FINGERPRINT_VERSION = 'ferry-idempotency-fingerprint/2';

/**
 * How the body entered the fingerprint. Part of the hash, so raw bytes and a
 * parsed value with the same text (`amount=1` as bytes, the JSON string
 * `"amount=1"`) are different requests.
 */
const BODY_FORM = { none: 'none', bytes: 'bytes', json: 'json' } as const;

/** Feeds one field as a 4-byte big-endian length and its bytes: no field can run into the next. */
function field(hash: Hash, bytes: Uint8Array): void {
  const length = Buffer.alloc(4);
  length.writeUInt32BE(bytes.byteLength);
  hash.update(length).update(bytes);
}

const utf8 = (text: string) => Buffer.from(text, 'utf8');

/**
 * sha256 over length-prefixed fields: the encoding's version, the upper-cased
 * method, the target (path and query string, as sent), the content type
 * (absent and empty differ), how the body came (none, raw bytes, parsed
 * value) and the body itself: the exact bytes, or the canonical JSON of a
 * parsed value. 32 bytes. The principal is not in it: it is part of the key.
 */
export function fingerprintHash(fp: RequestFingerprint): Buffer {
  if (typeof fp !== 'object' || fp === null) {
    throw new ValidationError('fingerprint', 'fingerprint must be { method, path, contentType?, body? }');
  }
  if (typeof fp.method !== 'string' || fp.method.length === 0) {
    throw new ValidationError('fingerprint.method', `fingerprint.method must be the HTTP method, got ${describeValue(fp.method)}`);
  }
  if (typeof fp.path !== 'string' || fp.path.length === 0) {
    throw new ValidationError('fingerprint.path', `fingerprint.path must be the request path, got ${describeValue(fp.path)}`);
  }
  const contentType = fp.contentType ?? null;
  if (contentType !== null && typeof contentType !== 'string') {
    throw new ValidationError(
      'fingerprint.contentType',
      `fingerprint.contentType must be the Content-Type header (a string) or null, got ${describeValue(contentType)}`,
    );
  }
  const hash = createHash('sha256');
  field(hash, utf8(FINGERPRINT_VERSION));
  field(hash, utf8(fp.method.toUpperCase()));
  field(hash, utf8(fp.path));
  // A presence flag, then the value: no Content-Type and `Content-Type: ` (empty) are not one request.
  field(hash, utf8(contentType === null ? '0' : `1${contentType.trim()}`));
  const body = fp.body;
  if (body === undefined) {
    field(hash, utf8(BODY_FORM.none));
    field(hash, Buffer.alloc(0));
  } else if (body instanceof Uint8Array) {
    field(hash, utf8(BODY_FORM.bytes));
    field(hash, body);
  } else {
    field(hash, utf8(BODY_FORM.json));
    field(hash, utf8(canonicalJson(body, 'fingerprint.body')));
  }
  return hash.digest();
}
