import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { ReservedSubjectError, ValidationError } from './errors.js';
import { quoteIdentifier, validateIdentifier } from './identifiers.js';
import { LIMITS, reservedSubjectToken, validateHeaders, validateKey, validateSubject, validateVersion } from './validate.js';

const rejects = (fn: () => unknown, field: string, fragment: string) =>
  assert.throws(fn, (e: unknown) => e instanceof ValidationError && e.field === field && e.message.includes(fragment));

describe('validation', () => {
  test('validation - subjects with wildcards, spaces or empty tokens are refused', () => {
    for (const ok of ['orders', 'orders.placed', 'a.b-c.d_e.9']) assert.equal(validateSubject(ok), ok);
    for (const bad of ['', 'orders.*', 'orders.>', 'a..b', '.a', 'a.', 'a b', 'a\tb', 'a\nb'])
      rejects(() => validateSubject(bad), 'subject', 'subject');
    rejects(() => validateSubject(42), 'subject', '42');
  });

  test('validation - subjects NATS reserves ($ first, _INBOX, _R_, _GR_) are refused with a ReservedSubjectError; look-alikes pass', () => {
    for (const bad of [
      '$JS.API.STREAM.DELETE.x',
      '$SYS.x',
      '$KV.b.k',
      '$O.b',
      '$MQTT.x',
      '$js.api',
      '$',
      '_INBOX',
      '_INBOX.x',
      '_R_.x',
      '_GR_.a.b',
    ]) {
      assert.equal(reservedSubjectToken(bad), bad.split('.')[0], bad);
      assert.throws(
        () => validateSubject(bad, 'events[2].subject'),
        (e: unknown) =>
          e instanceof ReservedSubjectError &&
          e instanceof ValidationError &&
          e.code === 'FERRY_INVALID' &&
          e.field === 'events[2].subject' &&
          e.subject === bad &&
          e.message.startsWith(`events[2].subject ${JSON.stringify(bad)} is reserved by NATS`),
      );
    }
    for (const ok of ['orders.$JS', '_inbox.x', '_INBOXES.x', 'INBOX.x', 'a._INBOX', 'x$.y', '_R', 'R_.x']) {
      assert.equal(reservedSubjectToken(ok), undefined, ok);
      assert.equal(validateSubject(ok), ok);
    }
  });

  test('validation - a key must be 1-256 characters without control characters', () => {
    assert.equal(validateKey('k'.repeat(LIMITS.keyMaxLength)), 'k'.repeat(LIMITS.keyMaxLength));
    rejects(() => validateKey(''), 'key', 'non-empty');
    rejects(() => validateKey('k'.repeat(LIMITS.keyMaxLength + 1)), 'key', String(LIMITS.keyMaxLength));
    rejects(() => validateKey('a\r\nb'), 'key', 'control');
    rejects(() => validateKey(' k'), 'key', 'whitespace');
  });

  test('validation - reserved and malformed header names are refused, trace headers pass', () => {
    assert.deepEqual(validateHeaders({ traceparent: '00-abc-01', 'x-tenant': 't1' }), { traceparent: '00-abc-01', 'x-tenant': 't1' });
    for (const name of ['ce-id', 'CE-Type', 'Nats-Msg-Id', 'nats-expected-stream', 'Content-Type']) {
      rejects(() => validateHeaders({ [name]: 'x' }), `headers.${name}`, 'reserved');
    }
    rejects(() => validateHeaders({ 'bad name': 'x' }), 'headers.bad name', 'token');
    rejects(() => validateHeaders({ a: 1 }), 'headers.a', 'string');
    rejects(() => validateHeaders({ a: 'x\r\ny' }), 'headers.a', 'control');
    rejects(() => validateHeaders({ a: '1', A: '2' }), 'headers.A', 'twice');
    const many = Object.fromEntries(Array.from({ length: LIMITS.headerCountMax + 1 }, (_, i) => [`h${i}`, 'v']));
    rejects(() => validateHeaders(many), 'headers', String(LIMITS.headerCountMax));
  });

  test('validation - versions are positive integers of at most 2^62', () => {
    assert.equal(validateVersion(3), 3n);
    assert.equal(validateVersion(2n ** 62n), 2n ** 62n);
    for (const bad of [0, -1, 1.5, '3', 2n ** 62n + 1n, 2n ** 63n - 1n, 2n ** 63n, Number.MAX_SAFE_INTEGER + 1])
      rejects(() => validateVersion(bad), 'version', 'positive');
  });

  test('validation - identifiers accept only the safe pattern, whatever is thrown at them', () => {
    for (const bad of ['x"; drop table t; --', 'Ferry', 'ferrу', '1abc', '', 'a'.repeat(64), 'a'.repeat(10_000), 'a-b']) {
      rejects(() => validateIdentifier(bad), 'schema', 'invalid schema');
    }
    fc.assert(
      fc.property(fc.string({ maxLength: 80 }), (s) => {
        try {
          const v = validateIdentifier(s);
          assert.match(v, /^[a-z_][a-z0-9_]{0,62}$/);
          assert.equal(quoteIdentifier(v), `"${v}"`);
        } catch (e) {
          assert.ok(e instanceof ValidationError);
        }
      }),
      { numRuns: 1000 },
    );
  });
});
