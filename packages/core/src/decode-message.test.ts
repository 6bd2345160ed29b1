import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decodeMessage, encodeEvent, headerPairs, WIRE_HEADERS } from './codec.js';
import type { FerryEvent } from './envelope.js';
import { ValidationError } from './errors.js';

// Issue 43 item 4: the stream path and the park path decoded one message two ways. These are the
// shapes that split them; `decodeMessage` is now the decoder of both.

const event: FerryEvent = {
  id: '0b5f4a8e-2f0c-4c1e-9d55-8f1e3a0b6c21',
  key: 'acct-1',
  version: 7n,
  subject: 'acct.balance',
  type: 'BalanceSet',
  source: 'test',
  time: new Date('2026-12-04T10:00:00Z'),
  contentType: 'application/json',
  data: Buffer.from('{"a":1}'),
  headers: { tenant: 't1' },
};
const pairs = (): Array<[string, string]> => encodeEvent(event).headers.map(([n, v]) => [n, v]);
const rename = (from: string, to: string) => pairs().map(([n, v]): [string, string] => [n === from ? to : n, v]);
const refused = (field: string, pattern: RegExp) => (e: unknown) =>
  e instanceof ValidationError && e.field === field && pattern.test(e.message);

test('decodeMessage - a Ferry message decodes to the event it was encoded from', () => {
  const back = decodeMessage(pairs(), event.data, event.subject);
  assert.deepEqual(back, { ...event, data: event.data });
});

test('decodeMessage - a key over 256 characters is refused, naming ce-partitionkey', () => {
  const long = pairs().map(([n, v]): [string, string] => [n, n === WIRE_HEADERS.partitionKey ? 'k'.repeat(300) : v]);
  assert.throws(() => decodeMessage(long, event.data), refused(WIRE_HEADERS.partitionKey, /at most 256|256/));
});

test('decodeMessage - CE-SEQUENCE is refused as ce-sequence in another case, not read as it', () => {
  assert.throws(
    () => decodeMessage(rename(WIRE_HEADERS.sequence, 'CE-SEQUENCE'), event.data),
    refused(WIRE_HEADERS.sequence, /"CE-SEQUENCE" is ce-sequence spelled in another case.*publish it as ce-sequence/),
  );
});

test('decodeMessage - a lowercase content-type is refused, not ignored (a JSON body would be handed over as bytes)', () => {
  assert.throws(
    () => decodeMessage(rename(WIRE_HEADERS.contentType, 'content-type'), Buffer.from('not json')),
    refused(WIRE_HEADERS.contentType, /"content-type" is Content-Type spelled in another case/),
  );
  // Both spellings at once are refused too: which one is meant is not for Ferry to guess.
  assert.throws(() => decodeMessage([...pairs(), ['content-type', 'text/plain']], event.data), ValidationError);
});

test('decodeMessage - a header given twice counts by its first value, as nats.js MsgHdrs.get reads it', () => {
  const twice = pairs().map(([n, v]): [string, string] => [n, n === WIRE_HEADERS.sequence ? '00000000000000000002' : v]);
  twice.push([WIRE_HEADERS.sequence, '00000000000000000009']);
  assert.equal(decodeMessage(twice, event.data).version, 2n);
});

test('decodeMessage - headerPairs keeps a MsgHdrs-like iterable as pairs, one per value, names as given', () => {
  const hdrs: Array<[string, string[]]> = [
    ['CE-SEQUENCE', ['1']],
    ['x-twice', ['a', 'b']],
  ];
  assert.deepEqual(headerPairs(hdrs), [
    ['CE-SEQUENCE', '1'],
    ['x-twice', 'a'],
    ['x-twice', 'b'],
  ]);
  assert.deepEqual(headerPairs(undefined), []);
});
