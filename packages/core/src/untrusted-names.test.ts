// Issue 13, item 1: every lookup by an untrusted string (header names here; event
// types in the inbox's options test) finds only what was really given. Random
// strings, and every Object.prototype member name, are thrown at each one.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { decodeEvent, headerReader, WIRE_HEADERS } from './codec.js';
import { validateHeaders } from './validate.js';

/** `constructor`, `toString`, `__proto__`, `hasOwnProperty`, `valueOf`, … */
export const PROTOTYPE_NAMES = Object.getOwnPropertyNames(Object.prototype);
const untrusted = fc.oneof(fc.constantFrom(...PROTOTYPE_NAMES), fc.string({ maxLength: 20 }), fc.stringMatching(/^[a-z_]{1,12}$/));
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,128}$/;

const wire: Record<string, string> = {
  [WIRE_HEADERS.specVersion]: '1.0',
  [WIRE_HEADERS.id]: '0190f2c4-6f2e-7c3a-9a47-1b2c3d4e5f60',
  [WIRE_HEADERS.source]: 'test',
  [WIRE_HEADERS.type]: 'T',
  [WIRE_HEADERS.partitionKey]: 'k',
  [WIRE_HEADERS.sequence]: '1',
};

test('untrusted names - headerReader finds only headers that were given, never an Object.prototype member', () => {
  assert.ok(PROTOTYPE_NAMES.includes('constructor') && PROTOTYPE_NAMES.includes('__proto__'));
  fc.assert(
    fc.property(untrusted, fc.dictionary(fc.stringMatching(/^x-[a-z]{1,6}$/), fc.string()), (name, given) => {
      const read = headerReader(given);
      // Exact names only, as NATS reads headers (decodeMessage says why).
      const expected = Object.hasOwn(given, name) ? given[name] : undefined;
      assert.equal(read(name), expected);
    }),
    { numRuns: 500 },
  );
  for (const name of PROTOTYPE_NAMES) assert.equal(headerReader({})(name), undefined, name);
});

test('untrusted names - a decoded header of any name is an own entry and leaves the prototype alone', () => {
  fc.assert(
    fc.property(
      untrusted.filter((n) => TOKEN.test(n) && !/^(ce-|nats-)|^content-type$/i.test(n)),
      (name) => {
        const event = decodeEvent((n) => (n === name ? 'v' : Object.hasOwn(wire, n) ? wire[n] : undefined), new Uint8Array(), 'a.b', [
          name,
        ]);
        assert.ok(Object.hasOwn(event.headers, name), `header ${name} kept`);
        assert.equal(Object.getPrototypeOf(event.headers), Object.prototype);
        assert.deepEqual(Object.keys(event.headers), [name]);
      },
    ),
    { numRuns: 300 },
  );
});

test('untrusted names - validateHeaders keeps a header named like an Object.prototype member as an own string entry', () => {
  for (const name of PROTOTYPE_NAMES.filter((n) => TOKEN.test(n))) {
    const given = JSON.parse(JSON.stringify({ [name]: 'v' })); // as a JSON body would give it
    const out = validateHeaders(given);
    assert.ok(Object.hasOwn(out, name), name);
    assert.equal(Object.getOwnPropertyDescriptor(out, name)?.value, 'v', name);
    assert.equal(Object.getPrototypeOf(out), Object.prototype, name);
  }
});
