import assert from 'node:assert/strict';
import { test } from 'node:test';
import { IdempotencyKeyError } from './errors.js';
import { errorReply, renderReply } from './http.js';
import { parseIdempotencyKeyHeader } from './key.js';

test('idempotency key header - bare and structured-field forms name the same key', () => {
  assert.equal(parseIdempotencyKeyHeader('8e03978e-40d5-43e8-bc93-6894a57f9324'), '8e03978e-40d5-43e8-bc93-6894a57f9324');
  assert.equal(parseIdempotencyKeyHeader('"8e03978e-40d5-43e8-bc93-6894a57f9324"'), '8e03978e-40d5-43e8-bc93-6894a57f9324');
  assert.equal(parseIdempotencyKeyHeader('  "a \\"quoted\\" key"  '), 'a "quoted" key');
  assert.equal(parseIdempotencyKeyHeader(['one']), 'one');
  assert.equal(parseIdempotencyKeyHeader(undefined), undefined);
});

test('idempotency key header - empty, over-long, badly quoted, repeated or non-ASCII values are 400s', () => {
  for (const bad of ['', '""', '   ', 'x'.repeat(256), '"a"b"', '"a\\b"', 'ключ', ['a', 'b']]) {
    assert.throws(() => parseIdempotencyKeyHeader(bad), IdempotencyKeyError, JSON.stringify(bad));
    try {
      parseIdempotencyKeyHeader(bad);
    } catch (err) {
      assert.equal(errorReply(err)?.status, 400);
    }
  }
  assert.equal(parseIdempotencyKeyHeader('k'.repeat(255))?.length, 255);
});

test('idempotency replies - a replay renders the same bytes and content type as the first answer, plus the replay header', () => {
  const body = { id: 7, items: [{ sku: 'a', qty: 2 }], note: 'ü' };
  const first = renderReply({ status: 201, body, headers: { Location: '/orders/7' } }, false);
  const replay = renderReply(
    { status: 201, body: JSON.parse(first.body?.toString('utf8') ?? ''), headers: { Location: '/orders/7' } },
    true,
  );
  assert.ok(first.body?.equals(replay.body ?? Buffer.alloc(0)));
  assert.equal(replay.headers['Idempotent-Replayed'], 'true');
  assert.equal(first.headers['Idempotent-Replayed'], undefined);
  assert.equal(replay.headers['Content-Type'], first.headers['Content-Type']);
  assert.equal(renderReply({ status: 204 }, false).body, undefined);
  assert.equal(renderReply({ status: 200, body: 'ok', headers: { 'content-type': 'text/csv' } }, false).headers['Content-Type'], undefined);
});
