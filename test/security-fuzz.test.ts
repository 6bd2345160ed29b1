// Property tests (fast-check) of the two places hostile input enters Ferry:
// the publisher's validation of what a caller passes, and the inbox's decoding
// of what arrives from the stream. Either they accept, or they raise Ferry's
// typed ValidationError — never another error — and a valid event always
// passes. Limits are enforced before any I/O: a recording Queryable proves
// that no SQL ran for a refused event.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decodeMessage, encodeEvent, type FerryEvent, isValidationError, LIMITS, type Queryable, WIRE_HEADERS } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import fc from 'fast-check';

const MAX_VERSION = 9_223_372_036_854_775_807n;
/** The largest version a caller may give (MAX_EVENT_VERSION): what the decoder reads may be larger. */
const MAX_GIVEN_VERSION = 2n ** 62n;
const RUNS = Number(process.env.FERRY_FUZZ_RUNS ?? 500);

/** A Queryable that records every statement and answers none: reaching it means validation passed. */
class RecordingQueryable {
  readonly statements: string[] = [];
  async query(text: string | { text: string }): Promise<never> {
    this.statements.push(typeof text === 'string' ? text : text.text);
    throw new ReachedSql();
  }
}
class ReachedSql extends Error {}

/** The inbox's decode path (packages/inbox/src/inbox.ts #handle and the park worker): decodeMessage. */
function inboxDecode(headers: Record<string, string>, body: Uint8Array, natsSubject: string): FerryEvent {
  return decodeMessage(Object.entries(headers), body, natsSubject);
}

// ---- generators -------------------------------------------------------------------------------

const anyText = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.constantFrom('', ' ', ' k', 'k ', 'a\r\nb', 'a\u0000b', 'x"; drop table t; --', 'ferrу', 'ＦＥＲＲＹ', 'orders.>', 'a..b', '*'),
  fc.string({ minLength: 250, maxLength: 300 }),
);
const anyValue = fc.oneof(
  anyText,
  fc.integer(),
  fc.bigInt(),
  fc.double(),
  fc.constant(null),
  fc.constant(undefined),
  fc.boolean(),
  fc.array(fc.string(), { maxLength: 3 }),
  fc.object({ maxDepth: 1 }),
);

const tokenChar = fc.constantFrom(...'abcdefghijklmnopqrstuvwxyzABCXYZ0123456789-_'.split(''));
const token = fc.string({ unit: tokenChar, minLength: 1, maxLength: 12 });
const validSubject = fc.array(token, { minLength: 1, maxLength: 5 }).map((t) => t.join('.'));
/** Non-empty, no control characters, no edge whitespace, at most 256 UTF-16 units. */
const validText = fc
  .string({ unit: fc.oneof(fc.constantFrom('a', 'Z', '7', '-', ' ', 'é', 'у', 'Ｆ', '😀'), tokenChar), minLength: 1, maxLength: 60 })
  .map((s) => s.trim())
  .filter((s) => s.length > 0 && s.length <= LIMITS.keyMaxLength);
const headerName = fc
  .string({ unit: tokenChar, minLength: 1, maxLength: 20 })
  .filter((n) => !/^(ce-|nats-)|^content-type$/i.test(n))
  .map((n) => `x-${n}`);
const validHeaders = fc
  .uniqueArray(fc.tuple(headerName, validText), { maxLength: 6, selector: ([n]) => n.toLowerCase() })
  .map(Object.fromEntries);
const validVersion = fc.bigInt({ min: 1n, max: MAX_GIVEN_VERSION });
const validTime = fc.date({ min: new Date('1970-01-01T00:00:00Z'), max: new Date('9999-12-31T23:59:59Z'), noInvalidDate: true });

// ---- publisher --------------------------------------------------------------------------------

test('fuzz - the publisher accepts or raises ValidationError for random subjects, keys, headers, bodies and versions, and runs no SQL when it refuses', async () => {
  const publisher = createPublisher({ schema: 'fuzz', source: 'fuzz', maxPayloadBytes: 4096 });
  const input = fc.record(
    {
      subject: fc.oneof(validSubject, anyValue),
      key: fc.oneof(validText, anyValue),
      type: fc.oneof(validText, anyValue),
      data: fc.oneof(fc.jsonValue(), fc.uint8Array({ maxLength: 5000 }), anyValue),
      id: fc.oneof(fc.uuid(), anyValue),
      version: fc.oneof(validVersion, anyValue, fc.bigInt({ min: MAX_GIVEN_VERSION + 1n, max: MAX_VERSION * 4n })),
      headers: fc.oneof(validHeaders, fc.dictionary(anyText, anyValue, { maxKeys: 4 }), anyValue),
      contentType: fc.oneof(fc.constant('application/json'), anyText),
    },
    { requiredKeys: [] },
  );
  await fc.assert(
    fc.asyncProperty(fc.array(input, { minLength: 1, maxLength: 3 }), async (events) => {
      const tx = new RecordingQueryable();
      try {
        if (events.length === 1) await publisher.publish(tx as unknown as Queryable, events[0] as never);
        else await publisher.publishMany(tx as unknown as Queryable, events as never);
        assert.fail('the recording Queryable never answers');
      } catch (err) {
        if (err instanceof ReachedSql) {
          assert.equal(tx.statements.length, 1, 'one statement per call');
          return;
        }
        assert.ok(isValidationError(err), `not a ValidationError: ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`);
        assert.equal(tx.statements.length, 0, 'no SQL for a refused event');
      }
    }),
    { numRuns: RUNS },
  );
});

test('fuzz - a valid publish input always reaches SQL', async () => {
  const publisher = createPublisher({ schema: 'fuzz', source: 'fuzz' });
  await fc.assert(
    fc.asyncProperty(
      fc.record({
        subject: validSubject,
        key: validText,
        type: validText,
        data: fc.jsonValue({ maxDepth: 3 }),
        id: fc.uuid({ version: [4, 7] }),
        version: validVersion,
        headers: validHeaders,
      }),
      async (event) => {
        const tx = new RecordingQueryable();
        await assert.rejects(publisher.publish(tx as unknown as Queryable, event as never), ReachedSql);
        assert.equal(tx.statements.length, 1);
      },
    ),
    { numRuns: RUNS },
  );
});

test('fuzz - key length, header count and size, and payload size limits are refused before any I/O', async () => {
  const publisher = createPublisher({ schema: 'fuzz', source: 'fuzz', maxPayloadBytes: 2048 });
  const base = { subject: 'orders.placed', key: 'k', type: 'T', data: { ok: true } };
  const cases: Array<[string, Record<string, unknown>]> = [
    ['key length', { key: 'k'.repeat(LIMITS.keyMaxLength + 1) }],
    ['header count', { headers: Object.fromEntries(Array.from({ length: LIMITS.headerCountMax + 1 }, (_, i) => [`x-h${i}`, 'v'])) }],
    ['header value size', { headers: { 'x-big': 'v'.repeat(LIMITS.headerValueMaxLength + 1) } }],
    ['header name size', { headers: { [`x-${'n'.repeat(LIMITS.headerNameMaxLength)}`]: 'v' } }],
    ['payload size', { data: { blob: 'b'.repeat(2048) } }],
    ['payload size in bytes', { data: new Uint8Array(2049) }],
  ];
  for (const [what, override] of cases) {
    const tx = new RecordingQueryable();
    await assert.rejects(publisher.publish(tx as unknown as Queryable, { ...base, ...override } as never), isValidationError, what);
    assert.equal(tx.statements.length, 0, `${what}: no SQL`);
  }
  // The same event one step inside the limits reaches SQL: the limits are the ones documented.
  const tx = new RecordingQueryable();
  await assert.rejects(
    publisher.publish(tx as unknown as Queryable, { ...base, key: 'k'.repeat(LIMITS.keyMaxLength) } as never),
    ReachedSql,
  );
});

// ---- inbox decoder ----------------------------------------------------------------------------

const validEvent = fc.record({
  id: fc.uuid({ version: [4, 7] }),
  key: validText,
  version: validVersion,
  subject: validSubject,
  type: validText,
  source: validText,
  time: validTime,
  contentType: fc.constantFrom('application/json', 'application/octet-stream', 'application/cloudevents+json; charset=utf-8'),
  data: fc.uint8Array({ maxLength: 256 }),
  headers: validHeaders,
});

function toHeaderRecord(headers: ReadonlyArray<readonly [string, string]>): Record<string, string> {
  return Object.fromEntries(headers);
}

test('fuzz - the inbox decoder accepts or raises ValidationError on random headers and bodies, and what it accepts is storable', () => {
  const wireName = fc.constantFrom(...Object.values(WIRE_HEADERS), 'traceparent', 'x-user', 'CE-ID', 'ce-SEQUENCE');
  const hostileValue = fc.oneof(
    anyText,
    fc.bigInt({ min: 0n, max: 10n ** 21n }).map(String),
    fc.constantFrom('1.0', '00000000000000000001', '99999999999999999999', '-1', '0', '1e3', '0x10', 'NaN', 'Infinity'),
    fc.date({ noInvalidDate: false }).map((d) => (Number.isNaN(d.getTime()) ? 'not a date' : d.toISOString())),
  );
  const message = fc.record({
    base: validEvent,
    overrides: fc.array(fc.tuple(wireName, fc.option(hostileValue)), { maxLength: 4 }),
    body: fc.uint8Array({ maxLength: 64 }),
    natsSubject: fc.oneof(validSubject, anyText),
  });
  fc.assert(
    fc.property(message, ({ base, overrides, body, natsSubject }) => {
      const headers = toHeaderRecord(encodeEvent(base).headers);
      for (const [name, value] of overrides) {
        if (value === null) delete headers[name];
        else headers[name] = value;
      }
      let event: FerryEvent;
      try {
        event = inboxDecode(headers, body, natsSubject);
      } catch (err) {
        assert.ok(isValidationError(err), `not a ValidationError: ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`);
        return;
      }
      // What the decoder lets through must fit the inbox's tables (bigint version, header-safe key).
      assert.ok(event.version >= 1n && event.version <= MAX_VERSION, `version ${event.version} fits a bigint`);
      assert.ok(!Number.isNaN(event.time.getTime()));
    }),
    { numRuns: RUNS * 4 },
  );
});

test('fuzz - a valid event survives encode and decode unchanged and is never refused by the inbox', () => {
  fc.assert(
    fc.property(validEvent, (generated) => {
      const event: FerryEvent = { ...generated, headers: { ...generated.headers } };
      const encoded = encodeEvent(event);
      const decoded = inboxDecode(toHeaderRecord(encoded.headers), encoded.body, event.subject);
      assert.deepEqual(decoded, event);
    }),
    { numRuns: RUNS * 2 },
  );
});
