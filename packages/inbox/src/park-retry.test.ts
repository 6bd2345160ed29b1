import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isValidationError } from '@ferry/core';
import { compileInboxOptions, INBOX_DEFAULTS } from './options.js';
import { parkRetryPolicy } from './park-retry.js';
import type { InboxOptions } from './types.js';

const base = {
  pool: { query: async () => ({ rows: [] }), connect: async () => ({ query: async () => ({ rows: [] }), release() {} }) },
  nc: { request: async () => ({}) },
  stream: 'ORDERS',
  consumer: 'billing',
  handlers: {},
} as unknown as InboxOptions;

/** The shortest time pg-boss takes for `retries` retries under `policy` (its waits at their low end), in seconds. */
function shortestSpanS(policy: ReturnType<typeof parkRetryPolicy>, retries = policy.retryLimit): number {
  let s = 0;
  for (let n = 0; n < retries; n++) s += Math.min(policy.retryDelayMax, policy.retryDelay * 2 ** Math.min(15, n));
  return s;
}

test('inbox options - retrySpanMs defaults to 15 minutes, and the default parking lot retries cover it', () => {
  const o = compileInboxOptions(base);
  assert.equal(INBOX_DEFAULTS.retrySpanMs, 900_000);
  assert.equal(o.retrySpanMs, 900_000);
  assert.deepEqual(o.parkRetry, { retryLimit: 20, retryDelay: 1, retryBackoff: true, retryDelayMax: 60 });
  assert.ok(shortestSpanS(o.parkRetry) >= 900, 'the retries last at least the span');
  assert.ok(shortestSpanS(o.parkRetry, o.parkRetry.retryLimit - 1) < 900, 'and one retry fewer would not');
});

test('inbox options - retrySpanMs is an integer from 0 to 86400000, refused otherwise with a ValidationError naming it', () => {
  for (const bad of [-1, 1.5, 86_400_001, '60000', Number.NaN, null]) {
    assert.throws(
      () => compileInboxOptions({ ...base, retrySpanMs: bad as never }),
      (err: unknown) =>
        isValidationError(err) && err.field === 'retrySpanMs' && /retrySpanMs must be an integer from 0 to 86400000, got/.test(err.message),
      String(bad),
    );
  }
  assert.equal(compileInboxOptions({ ...base, retrySpanMs: 86_400_000 }).retrySpanMs, 86_400_000);
});

test('park retry policy - the span is a floor on the retries, parkRetryLimit a floor on their count, 0 keeps the count alone', () => {
  for (const [retrySpanMs, parkRetryLimit, parkRetryDelayMs] of [
    [3_000, 0, 1_000],
    [60_000, 3, 1_000],
    [900_000, 3, 5_000],
    [3_600_000, 0, 120_000],
    [86_400_000, 100, 1_000],
  ] as const) {
    const p = parkRetryPolicy({ retrySpanMs, parkRetryLimit, parkRetryDelayMs });
    const label = `span ${retrySpanMs}, limit ${parkRetryLimit}, delay ${parkRetryDelayMs}`;
    assert.ok(shortestSpanS(p) * 1000 >= retrySpanMs, label);
    assert.ok(p.retryLimit >= parkRetryLimit, label);
    assert.equal(p.retryDelay, Math.ceil(parkRetryDelayMs / 1000), label);
    assert.equal(p.retryDelayMax, Math.max(60, p.retryDelay), label);
  }
  // The short span the tests use: waits of at least 1 s and 2 s.
  assert.equal(parkRetryPolicy({ retrySpanMs: 3_000, parkRetryLimit: 0, parkRetryDelayMs: 1_000 }).retryLimit, 2);
  assert.equal(parkRetryPolicy({ retrySpanMs: 0, parkRetryLimit: 3, parkRetryDelayMs: 1_000 }).retryLimit, 3);
  assert.equal(parkRetryPolicy({ retrySpanMs: 0, parkRetryLimit: 0, parkRetryDelayMs: 1_000 }).retryLimit, 0);
});
