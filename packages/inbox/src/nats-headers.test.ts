import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decodeEvent, encodeEvent, type FerryEvent, natsHeaderReader } from '@ferry/core';
import { headers, type MsgHdrs } from '@nats-io/transport-node';

/** How the inbox read a message's headers before `natsHeaderReader`: one `MsgHdrs.get` per name. */
function byGet(h: MsgHdrs) {
  return { read: (name: string) => h.get(name) || undefined, names: [...h.keys()] };
}

function wire(event: FerryEvent, extra: Array<[string, string]> = []): MsgHdrs {
  const h = headers();
  for (const [name, value] of encodeEvent(event, { msgId: event.id }).headers) h.append(name, value);
  for (const [name, value] of extra) h.append(name, value);
  return h;
}

const event: FerryEvent = {
  id: 'e-1',
  key: 'acct-1',
  version: 7n,
  subject: 'acct.balance',
  type: 'BalanceSet',
  source: 'test',
  time: new Date('2026-12-03T10:00:00Z'),
  contentType: 'application/json',
  data: Buffer.from('{"a":1}'),
  headers: { tenant: 't1' },
};

test('inbox - natsHeaderReader reads a message as MsgHdrs.get does, hostile names and repeated or empty values included', () => {
  const h = wire(event, [
    ['__proto__', 'p'],
    ['constructor', 'c'],
    ['toString', ''],
    ['X-Twice', 'first'],
    ['X-Twice', 'second'],
    ['x-twice', 'lower'],
    ['traceparent', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'],
  ]);
  const fast = natsHeaderReader(h);
  const slow = byGet(h);
  for (const name of [...h.keys(), 'missing', 'Ce-Id', 'CE-ID', 'hasOwnProperty', '__proto__', 'x-TWICE']) {
    assert.equal(fast.read(name), slow.read(name), name);
  }
  assert.deepEqual(
    fast.names,
    slow.names.filter((n) => slow.read(n) !== undefined),
  );
  const a = decodeEvent(fast.read, Buffer.from(event.data), 'acct.balance', fast.names);
  const b = decodeEvent(slow.read, Buffer.from(event.data), 'acct.balance', slow.names);
  assert.deepEqual(a, b);
  assert.equal(Object.getPrototypeOf(a.headers), Object.prototype, 'a __proto__ header does not become the prototype');
  assert.equal(Object.hasOwn(a.headers, '__proto__'), true);
  assert.equal(a.headers.constructor, 'c');
});

test('inbox - natsHeaderReader of a message without headers reads nothing', () => {
  const none = natsHeaderReader(undefined);
  assert.equal(none.read('ce-id'), undefined);
  assert.deepEqual(none.names, []);
});
