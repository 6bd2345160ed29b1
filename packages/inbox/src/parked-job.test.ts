import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decodeParked, RAW_JSON_MAX, readParkedJob } from './parked-job.js';

// The one decoder of parked job payloads is total (issue 42, item 7): the parking lot is a pg-boss
// table other roles may write, and one job `{format:1, headers:[null]}` made a whole consumer's
// Parked page answer 500 "object null is not iterable".

const good = {
  format: 1,
  consumer: 'billing',
  mode: 'latest',
  stream: 'ORDERS',
  streamSeq: 7,
  natsSubject: 'orders.placed',
  headers: [
    ['ce-id', '01a2b3c4-0000-7000-8000-000000000001'],
    ['__proto__', 'kept as a header'],
  ],
  body: Buffer.from('{"n":1}').toString('base64'),
  reason: 'handler-failed',
  error: 'Error: boom',
  parkedAt: '2026-12-04T10:00:00.000Z',
  deliveries: 5,
  id: '01a2b3c4-0000-7000-8000-000000000001',
  key: 'order-1',
  version: '3',
  type: 'OrderPlaced',
};

/** Parses as pg does a jsonb value: a `__proto__` key becomes an own property, as it is in the database. */
const fromDb = (json: string): unknown => JSON.parse(json);

const MALFORMED: Array<[string, unknown, RegExp]> = [
  ['headers [null]', fromDb('{"format":1,"headers":[null]}'), /consumer/],
  ['headers [null] in an otherwise good job', { ...good, headers: [null] }, /headers\[0\] is not a \[name, value\] pair/],
  ['headers not an array', { ...good, headers: { 'ce-id': 'x' } }, /headers is not an array/],
  ['a header pair of the wrong shape', { ...good, headers: [['ce-id']] }, /headers\[0\]/],
  ['a header value not a string', { ...good, headers: [['ce-id', 7]] }, /headers\[0\]/],
  ['missing data (no body)', (({ body: _, ...rest }) => rest)(good), /body is not a string/],
  ['data null', null, /not an object/],
  ['data an array', [1, 2], /not an object/],
  ['data a string', 'format 1', /not an object/],
  ['wrong format number', { ...good, format: 2 }, /format is 2, not 1/],
  ['format as text', { ...good, format: '1' }, /format is "1", not 1/],
  ['body not base64', { ...good, body: 'not base64!' }, /body is not base64/],
  ['body of the wrong length', { ...good, body: 'abc' }, /body is not base64/],
  ['a key that is an object', { ...good, key: { toString: 'x' } }, /key is not an event key/],
  ['a version that is not digits', { ...good, version: '1e9' }, /version is not a version/],
  ['an unknown mode', { ...good, mode: 'exactly-once' }, /mode is not one of/],
  ['an unknown reason', { ...good, reason: 'because' }, /reason is not a park reason/],
  ['fields only on __proto__', fromDb(`{"__proto__": ${JSON.stringify(good)}}`), /format is undefined, not 1|format is/],
  ['a huge key', { ...good, key: 'k'.repeat(5_000_000) }, /key is not an event key/],
  ['a huge header count', { ...good, headers: Array.from({ length: 5000 }, () => ['a', 'b']) }, /headers has 5000 entries/],
];

test('parked job - a well-formed job reads back as a fresh object of exactly its fields', () => {
  const withExtra = fromDb(`{"__proto__": {"key": "polluted"}, "extra": 1, ${JSON.stringify(good).slice(1)}`);
  const read = readParkedJob(withExtra);
  assert.equal(read.kind, 'parked', read.kind === 'malformed' ? read.problem : '');
  if (read.kind !== 'parked') return;
  assert.deepEqual(read.job, good);
  assert.equal(Object.hasOwn(read.job, 'extra'), false, 'unknown fields are not carried');
  assert.equal(Object.getPrototypeOf(read.job), Object.prototype);
  assert.equal(({} as { key?: unknown }).key, undefined, 'Object.prototype is untouched');
  // Past the shape check, a retry reaches the codec (which wants the CloudEvents headers this sample lacks).
  assert.throws(() => decodeParked(withExtra), /no ce-specversion header/);
});

for (const [what, data, problem] of MALFORMED) {
  test(`parked job - ${what} reads back malformed, naming the field, and never throws`, () => {
    const read = readParkedJob(data);
    assert.equal(read.kind, 'malformed');
    if (read.kind !== 'malformed') return;
    assert.match(read.problem, problem);
    assert.ok(read.raw.length <= RAW_JSON_MAX + 40, `raw is bounded: ${read.raw.length} characters`);
    assert.match(read.raw, /^[\x20-\x7e…]*$/, 'raw is printable ASCII (and the cut mark)');
    // A retry of it fails as a poison message, not a TypeError from deep inside the codec.
    assert.throws(
      () => decodeParked(data),
      (err: Error) => err.name === 'PoisonMessageError' && /not a Ferry parked event/.test(err.message),
    );
  });
}

test('parked job - a malformed job keeps its JSON, escaped to ASCII, cut when long', () => {
  const read = readParkedJob(fromDb('{"format":1,"headers":[null],"note":"<b>\\u0085\\u202e\\ud800"}'));
  assert.equal(read.kind, 'malformed');
  if (read.kind !== 'malformed') return;
  assert.equal(read.raw, '{"format":1,"headers":[null],"note":"<b>\\u0085\\u202e\\ud800"}');
  const long = readParkedJob({ format: 1, error: 'e'.repeat(100_000) });
  assert.equal(long.kind, 'malformed');
  if (long.kind === 'malformed') assert.match(long.raw, /… \(100\d{3} characters\)$/);
});

test('parked job - a handler error of any length keeps the job readable, its text cut', () => {
  const read = readParkedJob({ ...good, error: 'x'.repeat(1_000_000) });
  assert.equal(read.kind, 'parked');
  if (read.kind === 'parked') assert.match(read.job.error, /^x{65536}… \(1000000 characters\)$/);
});
