import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ValidationError } from '@ferry/core';
import * as v from 'valibot';
import { z } from 'zod';
import { type ContractEventMap, consumeData, defineContracts, defineEvent } from './index.js';

const V1 = defineEvent({
  type: 'OrderPlaced',
  version: 1,
  subject: 'orders.placed',
  schema: v.object({ orderId: v.string(), total: v.number() }),
  upcast: (d) => ({ orderId: d.orderId, total: { amount: d.total, currency: 'EUR' } }),
});
const V2 = defineEvent({
  type: 'OrderPlaced',
  version: 2,
  schema: z.object({ orderId: z.string(), total: z.object({ amount: z.number(), currency: z.string() }) }),
  upcast: (d) => ({ ...d, channel: 'web' }),
});
const V3 = defineEvent({
  type: 'OrderPlaced',
  version: 3,
  schema: z.object({
    orderId: z.string(),
    total: z.object({ amount: z.number(), currency: z.string() }),
    channel: z.enum(['web', 'shop']),
  }),
});

test('a registry refuses two contracts of one type and version, a gap, a missing or extra upcaster', () => {
  const other = defineEvent({ type: 'OrderPlaced', version: 1, schema: z.object({}), upcast: (d) => d });
  assert.throws(
    () => defineContracts([V1, other, V2, V3]),
    (e: unknown) => e instanceof ValidationError && /two contracts for "OrderPlaced" v1/.test(e.message),
  );
  assert.throws(() => defineContracts([V1, V3]), /version 2 is missing/);
  const noUpcast = defineEvent({ type: 'X', version: 1, schema: z.object({}) });
  const x2 = defineEvent({ type: 'X', version: 2, schema: z.object({}) });
  assert.throws(() => defineContracts([noUpcast, x2]), /"X" v1 has no upcast to v2/);
  assert.throws(() => defineContracts([V1, V2]), /"OrderPlaced" v2 has an upcast but there is no v3/);
  assert.throws(() => defineContracts([V1, V2, V3], { dataschema: 'https://s.example/{type}.json' }), /both have dataschema/);
  assert.throws(() => defineContracts([V1, V2, V3], { dataschema: ' https://s.example/{type}/{version} ' }), /whitespace at either end/);
  assert.throws(() => defineContracts([V1, V2, V3], { dataschema: () => 'x\ny' }), /control characters/);
  assert.throws(() => defineEvent({ type: 'X', version: 0, schema: z.object({}) }), /version must be a whole number/);
  assert.throws(() => defineEvent({ type: 'X', version: 1, schema: { parse() {} } as never }), /Standard Schema v1 validator/);
});

test('an old event is validated, upcast step by step and validated again; a newer or unknown one is refused with its reason', async () => {
  const registry = defineContracts([V3, V1, V2]);
  assert.deepEqual(
    registry.versions('OrderPlaced').map((c) => c.version),
    [1, 2, 3],
  );
  assert.equal(registry.dataschema(V2), 'ferry:OrderPlaced/v2');
  const v1 = await consumeData(
    registry,
    'OrderPlaced',
    { 'ce-dataschema': 'ferry:OrderPlaced/v1', 'ce-dataversion': '1' },
    { orderId: 'o1', total: 5 },
  );
  assert.deepEqual(v1, {
    ok: true,
    value: { orderId: 'o1', total: { amount: 5, currency: 'EUR' }, channel: 'web' },
    fromVersion: 1,
    version: 3,
  });
  const plain = await consumeData(registry, 'OrderPlaced', {}, { orderId: 'o1', total: 5 });
  assert.equal(plain.ok && plain.fromVersion, 1);
  const newer = await consumeData(registry, 'OrderPlaced', { 'ce-dataversion': '4' }, {});
  assert.equal(!newer.ok && newer.reason, 'unknown-version');
  const unknownUri = await consumeData(registry, 'OrderPlaced', { 'ce-dataschema': 'ferry:OrderPlaced/v9' }, {});
  assert.equal(!unknownUri.ok && unknownUri.reason, 'unknown-version');
  const bad = await consumeData(registry, 'OrderPlaced', { 'ce-dataversion': '2' }, { orderId: 'o1', total: 5 });
  assert.equal(!bad.ok && bad.reason, 'invalid-data');
  assert.match(!bad.ok ? bad.error : '', /total/);
  const badUp = defineContracts([
    defineEvent({ type: 'T', version: 1, schema: z.object({}), upcast: () => ({ nope: true }) }),
    defineEvent({ type: 'T', version: 2, schema: z.object({ yes: z.boolean() }) }),
  ]);
  const failed = await consumeData(badUp, 'T', {}, {});
  assert.equal(!failed.ok && failed.reason, 'upcast-failed');
  assert.match(!failed.ok ? failed.error : '', /upcast of "T" v1 → v2 returned data v2 refuses: yes/);
  const throws = defineContracts([
    defineEvent({
      type: 'T',
      version: 1,
      schema: z.object({}),
      upcast: () => {
        throw new Error('boom');
      },
    }),
    defineEvent({ type: 'T', version: 2, schema: z.object({}) }),
  ]);
  const threw = await consumeData(throws, 'T', {}, {});
  assert.deepEqual([!threw.ok && threw.reason, !threw.ok && /threw: boom/.test(threw.error)], ['upcast-failed', true]);
});

test('hostile type and field names stay data: no prototype is touched', async () => {
  const registry = defineContracts([
    defineEvent({ type: '__proto__', version: 1, schema: z.looseObject({ constructor: z.string() }) }),
    defineEvent({ type: 'constructor', version: 1, schema: z.object({}) }),
  ]);
  assert.deepEqual(registry.types(), ['__proto__', 'constructor']);
  const got = await consumeData(
    registry,
    '__proto__',
    JSON.parse('{"__proto__":{"polluted":"yes"}}'),
    JSON.parse('{"constructor":"x","__proto__":{"polluted":"yes"}}'),
  );
  assert.equal(got.ok, true);
  assert.equal(({} as Record<string, unknown>).polluted, undefined);
  assert.equal((await consumeData(registry, 'toString', {}, {})).ok, false);
});

test('the registry types a handler with the newest version of each type', () => {
  const registry = defineContracts([V1, V2, V3]);
  type M = ContractEventMap<typeof registry>;
  const ok: M['OrderPlaced'] = { orderId: 'o', total: { amount: 1, currency: 'EUR' }, channel: 'web' };
  // @ts-expect-error a v1 shape is not what the handler takes
  const old: M['OrderPlaced'] = { orderId: 'o', total: 5 };
  assert.ok(ok && old);
});
