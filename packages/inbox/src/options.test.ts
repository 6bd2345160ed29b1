import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { isValidationError } from '@ferry/core';
import { compileInboxOptions, INBOX_DEFAULTS } from './options.js';
import { literal } from './sql/gate-statements.js';
import type { InboxOptions } from './types.js';

const base = {
  pool: { query: async () => ({ rows: [] }), connect: async () => ({ query: async () => ({ rows: [] }), release() {} }) },
  nc: { request: async () => ({}) },
  stream: 'ORDERS',
  consumer: 'billing',
  handlers: {},
} as unknown as InboxOptions;

test('inbox options - defaults are applied once into a frozen object with units in the names', () => {
  const o = compileInboxOptions(base);
  assert.ok(Object.isFrozen(o));
  assert.equal(o.mode, INBOX_DEFAULTS.mode);
  assert.equal(o.concurrency, 32);
  assert.equal(o.maxAckPending, 64);
  assert.equal(o.ackWaitMs, 30_000);
  assert.deepEqual(o.backoffMs, [1_000, 5_000, 30_000]);
  assert.equal(o.schema, 'ferry');
  assert.equal(o.filterSubject, undefined);
  assert.equal(o.metrics, undefined, 'no metrics unless a registry is given');
  assert.equal(o.lagSampleIntervalMs, 5_000);
});

test('inbox options - maxTransactionMs follows the lock and idle timeouts unless given, and must leave the handler room after a lock wait', () => {
  assert.equal(compileInboxOptions(base).maxTransactionMs, 60_000);
  assert.equal(compileInboxOptions({ ...base, lockTimeoutMs: 3_000, transactionIdleTimeoutMs: 3_000 }).maxTransactionMs, 6_000);
  assert.equal(compileInboxOptions({ ...base, maxTransactionMs: 5_000, lockTimeoutMs: 1_000 }).maxTransactionMs, 5_000);
  assert.throws(
    () => compileInboxOptions({ ...base, maxTransactionMs: 30_000 }),
    (err: unknown) =>
      isValidationError(err) &&
      err.field === 'maxTransactionMs' &&
      /maxTransactionMs \(30000\) must be greater than lockTimeoutMs \(30000\)/.test(err.message) &&
      /raise maxTransactionMs or lower lockTimeoutMs/.test(err.message),
  );
});

test('inbox options - an invalid option fails at construction naming the option and the accepted range', () => {
  const cases: Array<[Partial<InboxOptions>, string, RegExp]> = [
    [{ concurrency: 0 }, 'concurrency', /from 1 to 1024/],
    [{ mode: 'newest' as never }, 'mode', /latest, sequential, dedupe/],
    [{ consumer: 'Billing-Service' }, 'consumer', /a-z, 0-9 and _/],
    [{ backoffMs: [] }, 'backoffMs', /non-empty array/],
    [{ ackWaitMs: 10 }, 'ackWaitMs', /from 1000/],
    [{ stream: 'a.b' }, 'stream', /stream name/],
    [{ filterSubjects: ['a.>', 'b.>'] }, 'filterSubjects', /one filter subject/],
    [{ handlers: { X: 'nope' } as never }, 'handlers.X', /must be a function/],
    [{ metrics: { metrics: () => '' } as never }, 'metrics', /prom-client Registry/],
    [{ lagSampleIntervalMs: 10 }, 'lagSampleIntervalMs', /from 100 to 600000/],
    [{ maxTransactionMs: 1.5 }, 'maxTransactionMs', /integer from 200 to 7200000/],
  ];
  for (const [patch, field, message] of cases) {
    assert.throws(
      () => compileInboxOptions({ ...base, ...patch }),
      (err: unknown) => isValidationError(err) && err.field === field && message.test(err.message),
      field,
    );
  }
});

test('inbox sql - literals are escaped as libpq does, and NUL is refused', () => {
  assert.equal(literal('plain'), "'plain'");
  assert.equal(literal("o'brien"), "'o''brien'");
  assert.equal(literal('a\\b'), " E'a\\\\b'");
  assert.throws(() => literal('a\u0000b'), RangeError);
});

test("inbox options - only the caller's own handlers are found, for any event type including Object.prototype names", () => {
  const own = async () => {};
  const o = compileInboxOptions({ ...base, handlers: { OrderPlaced: own, toString: own } });
  const prototypeNames = Object.getOwnPropertyNames(Object.prototype);
  // Random strings (printable, control and non-ASCII characters) beside every prototype member name.
  const random = Array.from({ length: 500 }, (_, i) =>
    String.fromCodePoint(...randomBytes(1 + (i % 12)).map((b) => (i % 3 === 0 ? b : 32 + (b % 95)))),
  );
  for (const type of [...prototypeNames, ...random, 'OrderPlaced', 'toString']) {
    const expected = type === 'OrderPlaced' || type === 'toString' ? own : undefined;
    assert.equal(o.handlers.get(type), expected, type);
  }
  for (const type of prototypeNames.filter((n) => n !== 'toString')) assert.equal(o.handlers.get(type), undefined, type);
});
