import assert from 'node:assert/strict';
import { test } from 'node:test';
import { backoffDelayMs, isValidationError } from '@ferry/core';
import { JetStreamApiError } from '@nats-io/jetstream';
import { errors } from '@nats-io/transport-node';
import { parseEnsureStream, parseLanesPerInstance, parseNatsUrls } from './cli/flag-parsers.js';
import { chainsByKey } from './daemon/dispatcher.js';
import { lockNamespace } from './daemon/lease-legacy-locks.js';
import { parseDuration } from './duration.js';
import { classifyPublishError } from './errors.js';
import { compileRelayOptions, RELAY_DEFAULTS, retrySpanMs } from './relay-options.js';

test('relay options - defaults are applied once and the result is frozen', () => {
  const o = compileRelayOptions({ databaseUrl: 'postgres://relay@db/app' });
  assert.equal(o.batchSize, RELAY_DEFAULTS.batchSize);
  assert.equal(o.lanesPerInstance, 'auto');
  assert.ok(Object.isFrozen(o));
});

test('relay options - an invalid option names itself and the accepted range', () => {
  for (const [options, field] of [
    [{ batchSize: 0 }, 'batchSize'],
    [{ maxInFlight: 1.5 }, 'maxInFlight'],
    [{ schema: 'Bad-Name' }, 'schema'],
    [{ backoffBaseMs: 1000, backoffMaxMs: 10 }, 'backoffMaxMs'],
  ] as const) {
    assert.throws(
      () => compileRelayOptions({ databaseUrl: 'postgres://x@y/z', ...options }),
      (e: unknown) => isValidationError(e) && e.field === field,
    );
  }
  assert.throws(() => compileRelayOptions({ databaseUrl: 'mysql://x' }), /PostgreSQL URL/);
});

test('relay backoff - full jitter stays within the capped exponential bound', () => {
  assert.equal(
    backoffDelayMs(1, 100, 10_000, () => 0.999999),
    99,
  );
  assert.equal(
    backoffDelayMs(4, 100, 10_000, () => 0.999999),
    799,
  );
  assert.equal(
    backoffDelayMs(30, 100, 10_000, () => 0.999999),
    9999,
  );
  assert.equal(
    backoffDelayMs(3, 100, 10_000, () => 0),
    0,
  );
  // 25 attempts, 500 ms base, 60 s cap: 63.5 s for the doubling steps, then 17 capped waits (1,083.5 s),
  // plus, before each of the 24 re-sends, a PubAck timeout (10 s) and a poll interval (0.5 s): 1,335.5 s.
  const defaults = { maxAttempts: 25, backoffBaseMs: 500, backoffMaxMs: 60_000, publishTimeoutMs: 10_000, pollIntervalMs: 500 };
  assert.equal(retrySpanMs(defaults), 1_335_500);
  assert.equal(retrySpanMs({ ...defaults, publishTimeoutMs: 0, pollIntervalMs: 0 }), 1_083_500, 'the backoff part alone');
  assert.equal(retrySpanMs({ ...defaults, maxAttempts: 1 }), 0, 'one attempt: no re-send');
});

test('relay errors - publish failures are sorted into retryable and permanent', () => {
  const c = (e: unknown) => {
    const r = classifyPublishError(e);
    return [r.reason, r.permanent, r.transport];
  };
  assert.deepEqual(c(new errors.TimeoutError()), ['timeout', false, true]);
  assert.deepEqual(c(new errors.ClosedConnectionError()), ['connection', false, true]);
  assert.deepEqual(c(new errors.RequestError('no responders', { cause: new errors.NoRespondersError('x') })), [
    'no_responders',
    false,
    false, // one unbound subject is not a NATS outage: it must not open the breaker for every key
  ]);
  assert.deepEqual(c(errors.InvalidArgumentError.format('payload', 'max_payload size exceeded')), ['max_payload', true, false]);
  assert.deepEqual(c(new errors.PermissionViolationError('denied', 'publish', 'orders.x')), ['permission', true, false]);
  assert.deepEqual(c(new JetStreamApiError({ code: 400, err_code: 10054, description: 'message size exceeds maximum allowed' })), [
    'max_payload',
    true,
    false,
  ]);
  assert.deepEqual(c(new JetStreamApiError({ code: 503, err_code: 10077, description: 'maximum messages exceeded' })), [
    'rejected',
    false,
    false,
  ]);
  assert.deepEqual(c(new Error('something else')), ['other', false, false]);
});

test('relay config - duration, lanes, NATS URL and stream flags parse or say what is accepted', () => {
  assert.equal(parseDuration('7d'), 7 * 86_400_000);
  assert.equal(parseDuration('90s'), 90_000);
  assert.throws(() => parseDuration('7 days'), /not a duration/);
  assert.equal(parseLanesPerInstance('auto'), 'auto');
  assert.equal(parseLanesPerInstance('4'), 4);
  assert.throws(() => parseLanesPerInstance('0'), /"auto" or an integer from 1 to 1024/);
  assert.deepEqual(parseNatsUrls('nats://a:4222, nats://b:4222'), ['nats://a:4222', 'nats://b:4222']);
  assert.throws(() => parseNatsUrls('http://a b'), /not a list of NATS URLs/);
  assert.deepEqual(parseEnsureStream('ORDERS=orders.>,refunds.*', [{ name: 'A', subjects: ['a'] }]), [
    { name: 'A', subjects: ['a'] },
    { name: 'ORDERS', subjects: ['orders.>', 'refunds.*'] },
  ]);
  assert.throws(() => parseEnsureStream('ORDERS'), /NAME=SUBJECT/);
});

test('relay lanes - lock namespaces are stable, non-negative 31-bit, and differ per schema', () => {
  const a = lockNamespace('ferry:lanes:ferry');
  assert.equal(a, lockNamespace('ferry:lanes:ferry'));
  assert.ok(a >= 0 && a < 2 ** 31);
  assert.notEqual(a, lockNamespace('ferry:lanes:billing'));
});

test('relay dispatcher - a claim becomes one chain per key in seq order, cut at the first row not due', () => {
  const row = (seq: number, key: string, due = true) => ({ seq: String(seq), key, due }) as Parameters<typeof chainsByKey>[0][number];
  const chains = chainsByKey([row(1, 'a'), row(2, 'b'), row(3, 'a'), row(4, 'b', false), row(5, 'c'), row(6, 'a'), row(7, 'b')]);
  assert.deepEqual(
    chains.map((c) => c.map((r) => r.seq)),
    [['1', '3', '6'], ['2'], ['5']],
  );
});
