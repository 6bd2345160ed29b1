import { describeValue } from '@ferry/core';
import { IdempotencyKeyError } from './errors.js';

export const MAX_KEY_LENGTH = 255;
/** Printable ASCII, space included (the draft's key is a structured-field string). */
const PRINTABLE_ASCII = /^[\x20-\x7e]+$/;

/** Validates a key given to `run()`: 1-255 printable ASCII characters. */
export function validateIdempotencyKey(key: unknown): string {
  if (key === undefined || key === null) {
    throw new IdempotencyKeyError(
      key,
      'the Idempotency-Key is missing: send one key per logical operation, e.g. a UUID, and reuse it for every retry',
    );
  }
  if (typeof key !== 'string') {
    throw new IdempotencyKeyError(key, `the Idempotency-Key must be a string, got ${describeValue(key)}`);
  }
  if (key.length === 0)
    throw new IdempotencyKeyError(key, 'the Idempotency-Key is empty: send 1-255 printable ASCII characters, e.g. a UUID');
  if (key.length > MAX_KEY_LENGTH) {
    throw new IdempotencyKeyError(key, `the Idempotency-Key is ${key.length} characters long; at most ${MAX_KEY_LENGTH} are accepted`);
  }
  if (!PRINTABLE_ASCII.test(key)) {
    throw new IdempotencyKeyError(key, `the Idempotency-Key ${describeValue(key, 40)} contains characters other than printable ASCII`);
  }
  return key;
}

/**
 * Reads an `Idempotency-Key` header value. The IETF draft sends it as a
 * structured-field string (`"8e03978e-…"`); a bare value is accepted too.
 * Returns `undefined` when the header is absent. Pass every field line the
 * request carried (Node's `req.headersDistinct`): more than one is refused,
 * and so is a bare value with a comma, the form two field lines take once
 * Node or a proxy joins them (`a1, a2`). A key with a comma is sent quoted.
 */
export function parseIdempotencyKeyHeader(value: string | readonly string[] | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string') {
    if (value.length > 1) {
      throw new IdempotencyKeyError(value, `the request has ${value.length} Idempotency-Key headers; send exactly one key per request`);
    }
    return parseIdempotencyKeyHeader(value[0] ?? '');
  }
  const v = value.trim();
  if (v.length >= 2 && v.startsWith('"') && v.endsWith('"')) {
    const inner = v.slice(1, -1);
    if (/(^|[^\\])"/.test(inner) || /\\(?!["\\])/.test(inner)) {
      throw new IdempotencyKeyError(value, `the Idempotency-Key ${describeValue(value, 40)} is not a valid quoted string`);
    }
    return validateIdempotencyKey(inner.replace(/\\(["\\])/g, '$1'));
  }
  if (v.includes(',')) {
    throw new IdempotencyKeyError(
      value,
      `the Idempotency-Key ${describeValue(value, 40)} has a comma, which is how several Idempotency-Key headers arrive once joined; send exactly one key, quoted ("…") if the key itself has a comma`,
    );
  }
  return validateIdempotencyKey(v);
}
