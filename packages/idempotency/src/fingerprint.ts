import { createHash } from 'node:crypto';
import { describeValue, ValidationError } from '@ferry/core';
import type { RequestFingerprint } from './types.js';

/**
 * Canonical JSON: object keys sorted, `undefined` members dropped, bytes as
 * `{"$bytes": base64}`, so the same request always hashes the same however
 * its body's keys were ordered.
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
      if (value instanceof Uint8Array)
        return `{"$bytes":${JSON.stringify(Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('base64'))}}`;
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

/** sha256 of the canonical request: method (upper case), path, body, principal. 32 bytes. */
export function fingerprintHash(fp: RequestFingerprint): Buffer {
  if (typeof fp !== 'object' || fp === null) {
    throw new ValidationError('fingerprint', 'fingerprint must be { method, path, body?, principal? }');
  }
  if (typeof fp.method !== 'string' || fp.method.length === 0) {
    throw new ValidationError('fingerprint.method', `fingerprint.method must be the HTTP method, got ${describeValue(fp.method)}`);
  }
  if (typeof fp.path !== 'string' || fp.path.length === 0) {
    throw new ValidationError('fingerprint.path', `fingerprint.path must be the request path, got ${describeValue(fp.path)}`);
  }
  const principal = fp.principal ?? null;
  if (principal !== null && typeof principal !== 'string') {
    throw new ValidationError('fingerprint.principal', `fingerprint.principal must be a string or null, got ${describeValue(principal)}`);
  }
  const canonical = canonicalJson(
    { v: 1, method: fp.method.toUpperCase(), path: fp.path, body: fp.body ?? null, principal },
    'fingerprint',
  );
  return createHash('sha256').update(canonical).digest();
}
