import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { type CloudEvent, HTTP } from 'cloudevents';
import fc from 'fast-check';
import {
  CONTRACT_HEADERS,
  decodeEvent,
  decodeMessage,
  encodedSize,
  encodedSizeAtMost,
  encodeEvent,
  formatSequence,
  headerReader,
  SEQUENCE_WIDTH,
  WIRE_HEADERS,
} from './codec.js';
import type { FerryEvent } from './envelope.js';
import { ValidationError } from './errors.js';

const token = fc.stringMatching(/^[a-z0-9_-]{1,12}$/);
const headerValue = fc.stringMatching(/^([!-~]([ -~]{0,38}[!-~])?)?$/);
const eventArb: fc.Arbitrary<FerryEvent> = fc.record({
  id: fc.uuid(),
  key: fc.stringMatching(/^[!-~]([ -~]{0,62}[!-~])?$/),
  version: fc.bigInt({ min: 1n, max: 9_223_372_036_854_775_807n }),
  subject: fc.array(token, { minLength: 1, maxLength: 4 }).map((t) => t.join('.')),
  type: fc.stringMatching(/^[A-Za-z][A-Za-z0-9.]{0,30}$/),
  source: fc.stringMatching(/^[a-z][a-z0-9/-]{0,30}$/),
  time: fc.date({ min: new Date('1970-01-01T00:00:00Z'), max: new Date('9999-12-31T00:00:00Z'), noInvalidDate: true }),
  contentType: fc.constantFrom('application/json', 'application/octet-stream', 'text/plain; charset=utf-8'),
  data: fc.uint8Array({ maxLength: 256 }),
  headers: fc.dictionary(fc.stringMatching(/^x-[a-z]{1,10}$/), headerValue, { maxKeys: 4 }),
});

function toRecord(headers: ReadonlyArray<readonly [string, string]>): Record<string, string> {
  return Object.fromEntries(headers);
}

describe('codec', () => {
  test('codec - every event survives encode then decode unchanged', () => {
    fc.assert(
      fc.property(eventArb, (event) => {
        const enc = encodeEvent(event);
        const names = enc.headers.map(([n]) => n);
        const back = decodeEvent(headerReader(toRecord(enc.headers)), enc.body, enc.subject, names);
        assert.deepEqual(
          { ...back, data: Buffer.from(back.data), headers: { ...back.headers } },
          { ...event, data: Buffer.from(event.data), headers: { ...event.headers } },
        );
      }),
      { numRuns: 300 },
    );
  });

  test('codec - ce-sequence is zero-padded so text order is version order', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 1n, max: 2n ** 63n - 1n }), fc.bigInt({ min: 1n, max: 2n ** 63n - 1n }), (a, b) => {
        const [sa, sb] = [formatSequence(a), formatSequence(b)];
        assert.equal(sa.length, SEQUENCE_WIDTH);
        assert.equal(a < b, sa < sb);
      }),
    );
  });

  test('codec - Nats-Msg-Id is the event id unless a replay gives its own', () => {
    const event = fc.sample(eventArb, 1)[0] as FerryEvent;
    assert.equal(toRecord(encodeEvent(event).headers)[WIRE_HEADERS.msgId], event.id);
    const replayed = toRecord(encodeEvent(event, { msgId: `${event.id}:replay:1` }).headers);
    assert.equal(replayed[WIRE_HEADERS.msgId], `${event.id}:replay:1`);
    assert.equal(replayed[WIRE_HEADERS.id], event.id);
  });

  test('codec - the CloudEvents SDK reads a Ferry event as a valid CloudEvent', () => {
    fc.assert(
      fc.property(eventArb, fc.jsonValue(), (base, json) => {
        const event: FerryEvent = { ...base, contentType: 'application/json', data: Buffer.from(JSON.stringify(json)) };
        const enc = encodeEvent(event);
        const ce = HTTP.toEvent({ headers: toRecord(enc.headers), body: Buffer.from(enc.body).toString('utf8') });
        const one = (Array.isArray(ce) ? ce[0] : ce) as CloudEvent<unknown> | undefined;
        assert.ok(one);
        one.validate();
        assert.equal(one.id, event.id);
        assert.equal(one.type, event.type);
        assert.equal(one.source, event.source);
        assert.equal(one.subject, event.subject);
        assert.equal(one.partitionkey, event.key);
        assert.equal(one.sequence, formatSequence(event.version));
        assert.equal(new Date(one.time as string).getTime(), event.time.getTime());
        // The SDK hands back top-level JSON scalars as their text.
        const data = typeof one.data === 'string' && typeof json !== 'string' ? JSON.parse(one.data) : one.data;
        assert.deepEqual(data, JSON.parse(JSON.stringify(json)));
      }),
      { numRuns: 100 },
    );
  });

  test('codec - encodedSize counts the header block and the body', () => {
    const event = fc.sample(eventArb, 1)[0] as FerryEvent;
    const enc = encodeEvent(event);
    const manual = `NATS/1.0\r\n${enc.headers.map(([n, v]) => `${n}: ${v}\r\n`).join('')}\r\n`;
    assert.equal(encodedSize(enc), Buffer.byteLength(manual) + enc.body.byteLength);
  });

  test('codec - encodedSizeAtMost is never below the exact size, for any strings and headers, and for a longer msgId', () => {
    // Any UTF-16 text (astral characters, lone surrogates, 3-byte CJK), hostile header names, values that are not strings.
    const text = fc.string({ unit: 'binary', minLength: 1, maxLength: 40 });
    const anyEvent = fc.record({
      id: text,
      key: text,
      version: fc.bigInt({ min: 1n, max: 9_223_372_036_854_775_807n }),
      subject: text,
      type: text,
      source: text,
      time: fc.date({ min: new Date(-8.64e15), max: new Date(8.64e15), noInvalidDate: true }),
      contentType: text,
      data: fc.uint8Array({ maxLength: 64 }),
      headers: fc.dictionary(
        fc.oneof(text, fc.constantFrom('__proto__', 'constructor', 'ce-id', 'Nats-Msg-Id', 'content-type')),
        fc.oneof(text, fc.constant(7 as unknown as string)),
      ),
    });
    fc.assert(
      fc.property(anyEvent, text, (event, msgId) => {
        assert.ok(encodedSizeAtMost(event) >= encodedSize(encodeEvent(event)));
        assert.ok(encodedSizeAtMost(event, msgId.length) >= encodedSize(encodeEvent(event, { msgId })));
      }),
      { numRuns: 300 },
    );
    const cjk = { ...(fc.sample(eventArb, 1)[0] as FerryEvent), key: '鍵'.repeat(100), headers: { 'x-note': 'ü'.repeat(50) } };
    assert.ok(encodedSizeAtMost(cjk) >= encodedSize(encodeEvent(cjk)));
  });

  test('codec - a message without Ferry headers is rejected naming the missing header', () => {
    const event = fc.sample(eventArb, 1)[0] as FerryEvent;
    const headers = toRecord(encodeEvent(event).headers);
    for (const missing of [
      WIRE_HEADERS.specVersion,
      WIRE_HEADERS.id,
      WIRE_HEADERS.type,
      WIRE_HEADERS.partitionKey,
      WIRE_HEADERS.sequence,
    ]) {
      const { [missing]: _, ...rest } = headers;
      assert.throws(
        () => decodeEvent(headerReader(rest), new Uint8Array()),
        (e: unknown) => e instanceof ValidationError && e.field === missing && e.message.includes(missing),
      );
    }
  });

  test('codec - a non-numeric or zero ce-sequence is rejected', () => {
    const event = fc.sample(eventArb, 1)[0] as FerryEvent;
    for (const bad of ['abc', '-1', '0', '1e5', '123456789012345678901234']) {
      const headers = { ...toRecord(encodeEvent(event).headers), [WIRE_HEADERS.sequence]: bad };
      assert.throws(() => decodeEvent(headerReader(headers), new Uint8Array()), ValidationError);
    }
  });

  test('codec - decoding arbitrary headers either succeeds or raises ValidationError', () => {
    fc.assert(
      fc.property(
        fc.dictionary(fc.constantFrom(...Object.values(WIRE_HEADERS), 'x-a'), fc.string({ maxLength: 30 })),
        fc.uint8Array(),
        (h, body) => {
          try {
            decodeEvent(headerReader(h), body);
          } catch (e) {
            assert.ok(e instanceof ValidationError, String(e));
          }
        },
      ),
      { numRuns: 500 },
    );
  });

  test('codec - stored headers cannot replace or duplicate a reserved header, in any case', () => {
    const event = fc.sample(eventArb, 1)[0] as FerryEvent;
    const forged = {
      'ce-partitionkey': 'VICTIM',
      'CE-SEQUENCE': '00000000000000000999',
      'Ce-Type': 'Forged',
      'Nats-Msg-Id': 'forged',
      'nats-expected-stream': 'forged',
      'content-type': 'text/forged',
      'x-kept': 'yes',
      'X-KEPT': 'second spelling',
      'x-number': 5 as unknown as string,
      'CE-DATASCHEMA': 'forged:Other/v9',
    };
    const enc = encodeEvent({ ...event, headers: forged });
    const names = enc.headers.map(([n]) => n.toLowerCase());
    assert.equal(new Set(names).size, names.length, `a header name appears twice: ${names.join(', ')}`);
    // Copied with set() in order (as the relay does) or read as a record: the event's own fields win.
    const last = new Map(enc.headers.map(([n, v]) => [n.toLowerCase(), v]));
    assert.equal(last.get('ce-partitionkey'), event.key);
    assert.equal(last.get('ce-sequence'), formatSequence(event.version));
    assert.equal(last.get('ce-type'), event.type);
    assert.equal(last.get('nats-msg-id'), event.id);
    assert.equal(last.get('content-type'), event.contentType);
    assert.equal(last.get('nats-expected-stream'), undefined);
    assert.equal(last.get('x-kept'), 'yes');
    assert.equal(last.get('x-number'), undefined);
    assert.equal(last.get('ce-dataschema'), undefined, 'a contract header passes only under its exact name');
    assert.deepEqual(
      enc.headers.slice(-10).map(([n]) => n),
      Object.values(WIRE_HEADERS).filter((n) => !CONTRACT_HEADERS.includes(n)),
    );
  });

  test('codec - the contract headers travel under their exact names and come back in headers; a malformed value is left out', () => {
    const event = fc.sample(eventArb, 1)[0] as FerryEvent;
    const headers = { 'ce-dataschema': 'ferry:OrderPlaced/v2', 'ce-dataversion': '2' };
    const enc = encodeEvent({ ...event, headers });
    assert.deepEqual(enc.headers.slice(-2), [
      ['ce-dataschema', 'ferry:OrderPlaced/v2'],
      ['ce-dataversion', '2'],
    ]);
    const back = decodeMessage(enc.headers, enc.body, enc.subject);
    assert.equal(back.headers['ce-dataschema'], 'ferry:OrderPlaced/v2');
    assert.equal(back.headers['ce-dataversion'], '2');
    const bad = encodeEvent({ ...event, headers: { 'ce-dataschema': 'a\r\nNats-Msg-Id: x', 'ce-dataversion': 'x'.repeat(2000) } });
    assert.equal(
      bad.headers.some(([n]) => n.startsWith('ce-data')),
      false,
    );
  });
});
