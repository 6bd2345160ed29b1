import assert from 'node:assert/strict';
import { test } from 'node:test';
import { encodeEvent } from '@ferry/core';
import { headers, type MsgHdrs, type MsgHdrsImpl } from '@nats-io/transport-node';
import { natsHeaders } from './wire-headers.js';

/** What the relay built before: nats.js's headers() and append() for each pair. */
function appended(pairs: ReadonlyArray<readonly [string, string]>) {
  const h = headers();
  for (const [name, value] of pairs) h.append(name, value);
  return h;
}

/** The bytes nats.js writes for the headers (what its publish calls), or the error building them threw. */
function outcome(build: () => MsgHdrs): { bytes?: string; error?: string } {
  try {
    return { bytes: Buffer.from((build() as MsgHdrsImpl).encode()).toString('latin1') };
  } catch (err) {
    return { error: `${(err as Error).constructor.name}: ${(err as Error).message}` };
  }
}

test('wire headers - the same bytes as headers() and append() for an encoded event, user headers and trace headers included', () => {
  const encoded = encodeEvent({
    id: '0b6c4f3e-2f7a-4b8e-9a51-3c2d1e0f9a87',
    key: 'order-42',
    version: 7n,
    subject: 'orders.placed',
    type: 'OrderPlaced',
    source: 'shop',
    time: new Date('2026-12-03T09:00:00.123Z'),
    contentType: 'application/json',
    data: Buffer.from('{}'),
    headers: { 'x-tenant': 'acme', traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'x-ü': 'é' },
  });
  const pairs = encoded.headers.filter(([name]) => name !== 'x-ü'); // a non-ASCII name is refused, tested below
  const expected = outcome(() => appended(pairs));
  assert.ok(expected.bytes?.includes('ce-sequence: 00000000000000000007'));
  assert.deepEqual(
    outcome(() => natsHeaders(pairs)),
    expected,
  );
  const h = natsHeaders(pairs);
  assert.equal(h.get('Nats-Msg-Id'), '0b6c4f3e-2f7a-4b8e-9a51-3c2d1e0f9a87');
  assert.deepEqual(h.keys(), appended(pairs).keys());
});

test('wire headers - values trimmed, names kept as given, repeated names appended, and the same errors as append()', () => {
  const cases: Array<Array<readonly [string, string]>> = [
    [['x-a', '  padded\t ']],
    [['X-Mixed-Case', 'v']],
    [
      ['x-a', '1'],
      ['x-a', '2'],
    ],
    [['', 'empty name']],
    [['x-a', '']],
    [['x-a', 'unicode é ☃']],
    [['x-a', 'bad\r\nvalue']],
    [['x-a', 'bad\nvalue']],
    [['bad:name', 'v']],
    [['bad name', 'v']],
    [['x-ü', 'v']],
    [['x-\u007f', 'v']],
  ];
  for (const pairs of cases) {
    assert.deepEqual(
      outcome(() => natsHeaders(pairs)),
      outcome(() => appended(pairs)),
      JSON.stringify(pairs),
    );
  }
  assert.match(outcome(() => natsHeaders([['x-a', 'a\rb']])).error ?? '', /InvalidArgumentError/);
  assert.match(outcome(() => natsHeaders([['a:b', 'v']])).error ?? '', /InvalidArgumentError/);
});
