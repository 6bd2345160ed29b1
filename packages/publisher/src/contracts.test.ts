import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { ContractValidationError, ContractValidatorError, defineContracts, defineEvent } from '@ferry/contracts';
import { isValidationError, type Queryable, quoteIdentifier, withTransaction } from '@ferry/core';
import { createTestDatabase, type TestDatabase } from '@ferry/testkit';
import type { StandardSchemaV1 } from '@standard-schema/spec';
import * as v from 'valibot';
import { z } from 'zod';
import { createPublisher } from './index.js';

// Publishing by contract (issue 45): checked before the insert, stamped with the contract.

let db: TestDatabase;
let s: string;
before(async () => {
  db = await createTestDatabase({ prefix: 'pub_contracts', max: 6 });
  s = quoteIdentifier(db.schema);
});
after(() => db.close());

const order = { orderId: v.pipe(v.string(), v.uuid()), customer: v.pipe(v.string(), v.minLength(1)) };
const PlacedV1 = defineEvent({
  type: 'OrderPlaced',
  version: 1,
  subject: 'orders.placed',
  schema: v.object({ ...order, totalCents: v.pipe(v.number(), v.integer()) }),
  upcast: (d) => ({ orderId: d.orderId, customer: d.customer, total: { amountCents: d.totalCents, currency: 'EUR' } }),
});
const PlacedV2 = defineEvent({
  type: 'OrderPlaced',
  version: 2,
  subject: 'orders.placed',
  schema: v.object({ ...order, total: v.object({ amountCents: v.number(), currency: v.pipe(v.string(), v.regex(/^[A-Z]{3}$/)) }) }),
});
const Cancelled = defineEvent({ type: 'OrderCancelled', version: 1, schema: z.object({ orderId: z.string(), reason: z.string() }) });
/** A Standard Schema whose validate throws, as a buggy refinement would. */
const throwing: StandardSchemaV1<{ n: number }> = {
  '~standard': {
    version: 1,
    vendor: 'test',
    validate: () => {
      throw new RangeError('refinement blew up');
    },
  },
};
const Broken = defineEvent({ type: 'Broken', version: 1, subject: 'x.broken', schema: throwing });
/** An asynchronous validator: a promise per check. */
const asyncSchema: StandardSchemaV1<{ n: number }> = {
  '~standard': {
    version: 1,
    vendor: 'test',
    validate: async (value) =>
      typeof (value as { n?: unknown })?.n === 'number'
        ? { value: value as { n: number } }
        : { issues: [{ message: 'n must be a number', path: ['n'] }] },
  },
};
const Slow = defineEvent({ type: 'Slow', version: 1, subject: 'x.slow', schema: asyncSchema });
const contracts = defineContracts([PlacedV1, PlacedV2, Cancelled, Broken, Slow]);

const placed = (key: string) => ({ orderId: key, customer: 'ada', total: { amountCents: 4200, currency: 'EUR' } });

async function rows(key: string) {
  const r = await db.pool.query<{ subject: string; headers: Record<string, string>; data: unknown; type: string }>(
    `SELECT subject, headers, convert_from(data, 'UTF8')::jsonb AS data, type FROM ${s}.outbox o WHERE key = $1 ORDER BY o.seq`,
    [key],
  );
  return r.rows;
}

describe('publisher - contracts', () => {
  const publisher = () => createPublisher({ schema: db.schema, source: 'orders', contracts });

  test('publisher - an event is stamped with its contract, takes the contract subject, and stores the caller data', async () => {
    const key = randomUUID();
    const p = publisher();
    await withTransaction(db.pool, (tx) => p.publish(tx, { key, type: 'OrderPlaced', data: placed(key), headers: { tenant: 't1' } }));
    await withTransaction(db.pool, (tx) =>
      p.publish(tx, { key, type: 'OrderPlaced', contractVersion: 1, data: { orderId: key, customer: 'ada', totalCents: 99 } }),
    );
    const [v2, v1] = await rows(key);
    assert.equal(v2?.subject, 'orders.placed');
    assert.deepEqual(v2?.headers, { tenant: 't1', 'ce-dataschema': 'ferry:OrderPlaced/v2', 'ce-dataversion': '2' });
    assert.deepEqual(v2?.data, placed(key));
    assert.deepEqual(v1?.headers, { 'ce-dataschema': 'ferry:OrderPlaced/v1', 'ce-dataversion': '1' });
    // An explicit subject wins over the contract's.
    const other = randomUUID();
    await withTransaction(db.pool, (tx) =>
      p.publish(tx, { key: other, type: 'OrderPlaced', subject: 'orders.eu.placed', data: placed(other) }),
    );
    assert.equal((await rows(other))[0]?.subject, 'orders.eu.placed');
    // Published again with its id: the same stamp, so the same content, and nothing new is written.
    const id = randomUUID();
    await withTransaction(db.pool, (tx) => p.publish(tx, { id, key: other, type: 'OrderPlaced', data: placed(other) }));
    const again = await withTransaction(db.pool, (tx) => p.publish(tx, { id, key: other, type: 'OrderPlaced', data: placed(other) }));
    assert.equal(again.existing, true);
  });

  test('publisher - invalid data is refused before any SQL with every issue, and the transaction stays usable', async () => {
    const key = randomUUID();
    const p = publisher();
    const after = await withTransaction(db.pool, async (tx) => {
      const err = await p
        .publish(tx, {
          key,
          type: 'OrderPlaced',
          data: { orderId: 'not-a-uuid', customer: '', total: { amountCents: 1, currency: 'eur' } },
        })
        .catch((e: unknown) => e);
      assert.ok(err instanceof ContractValidationError, String(err));
      assert.ok(isValidationError(err));
      assert.equal(err.type, 'OrderPlaced');
      assert.equal(err.contractVersion, 2);
      assert.deepEqual(
        err.issues.map((i) => i.path),
        ['orderId', 'customer', 'total.currency'],
      );
      assert.match(
        err.message,
        /^event\.data: "OrderPlaced" v2 refused the data: orderId: .*; customer: .*; total\.currency: .*nothing was written$/,
      );
      return (await tx.query<{ one: number }>('SELECT 1 AS one')).rows[0]?.one;
    });
    assert.equal(after, 1);
    assert.deepEqual(await rows(key), []);
  });

  test('publisher - publishMany checks every event before it writes any', async () => {
    const key = randomUUID();
    const p = publisher();
    const err = await withTransaction(db.pool, (tx) =>
      p.publishMany(tx, [
        { key, type: 'OrderPlaced', data: placed(key) },
        { key, type: 'OrderCancelled', subject: 'orders.cancelled', data: { orderId: key, reason: 7 as unknown as string } },
        { key, type: 'OrderPlaced', data: placed(key) },
      ]),
    ).catch((e: unknown) => e);
    assert.ok(err instanceof ContractValidationError, String(err));
    assert.match(err.message, /^events\[1\]\.data: "OrderCancelled" v1 refused the data: reason: /);
    assert.deepEqual(await rows(key), []);
    const ok = await withTransaction(db.pool, (tx) =>
      p.publishMany(tx, [
        { key, type: 'OrderPlaced', data: placed(key) },
        { key, type: 'OrderCancelled', subject: 'orders.cancelled', data: { orderId: key, reason: 'changed mind' } },
      ]),
    );
    assert.equal(ok.length, 2);
    assert.deepEqual(
      (await rows(key)).map((r) => r.headers['ce-dataschema']),
      ['ferry:OrderPlaced/v2', 'ferry:OrderCancelled/v1'],
    );
  });

  test('publisher - bad input names the field and the fix: unknown type, version, bytes, no subject, a validator that throws', async () => {
    const key = randomUUID();
    const p = publisher();
    const refused = (event: unknown) =>
      withTransaction(db.pool, (tx) => p.publish(tx, event as Parameters<typeof p.publish>[1])).catch((e: unknown) => e);
    let err = await refused({ key, type: 'OrderShipped', subject: 'a.b', data: {} });
    assert.ok(
      isValidationError(err) && /event\.type "OrderShipped" has no contract in this publisher's registry/.test(err.message),
      String(err),
    );
    err = await refused({ key, type: 'OrderPlaced', contractVersion: 3, data: placed(key) });
    assert.ok(isValidationError(err) && /contractVersion 3: "OrderPlaced" has versions 1 to 2/.test(err.message), String(err));
    err = await refused({ key, type: 'OrderPlaced', data: new Uint8Array([1]), contentType: 'application/octet-stream' });
    assert.ok(isValidationError(err) && /its data is JSON/.test(err.message), String(err));
    err = await refused({ key, type: 'OrderCancelled', data: { orderId: key, reason: 'x' } });
    assert.ok(isValidationError(err) && err.field === 'event.subject', String(err));
    err = await refused({ key, type: 'Broken', data: { n: 1 } });
    assert.ok(err instanceof ContractValidatorError, String(err));
    assert.match(err.message, /the validator of "Broken" v1 threw instead of returning issues: refinement blew up/);
    err = await refused({ key, type: 'Slow', data: { n: 'x' } });
    assert.ok(err instanceof ContractValidationError && /n: n must be a number/.test(err.message), String(err));
    // A caller cannot set the stamp itself.
    err = await refused({ key, type: 'OrderPlaced', data: placed(key), headers: { 'ce-dataschema': 'ferry:OrderPlaced/v1' } });
    assert.ok(isValidationError(err) && /reserved/.test(err.message), String(err));
    assert.deepEqual(await rows(key), []);
    await withTransaction(db.pool, (tx) => p.publish(tx, { key, type: 'Slow', data: { n: 1 } }));
    assert.equal((await rows(key)).length, 1);
  });

  test('publisher - publish is typed by the registry: the newest version by default, an older one by contractVersion', () => {
    const p = publisher();
    const typed = (tx: Queryable) => {
      void p.publish(tx, {
        key: 'k',
        type: 'OrderPlaced',
        data: { orderId: 'a', customer: 'b', total: { amountCents: 1, currency: 'EUR' } },
      });
      void p.publish(tx, { key: 'k', type: 'OrderPlaced', contractVersion: 1, data: { orderId: 'a', customer: 'b', totalCents: 1 } });
      // @ts-expect-error v2 (the newest) has no bare totalCents
      void p.publish(tx, { key: 'k', type: 'OrderPlaced', data: { orderId: 'a', customer: 'b', totalCents: 1 } });
      // @ts-expect-error the registry has no OrderShipped
      void p.publish(tx, { key: 'k', type: 'OrderShipped', data: {} });
      // @ts-expect-error OrderPlaced has no version 3
      void p.publish(tx, { key: 'k', type: 'OrderPlaced', contractVersion: 3, data: {} });
    };
    assert.equal(typeof typed, 'function');
  });

  test('publisher - hostile names stay data: a __proto__ type and a __proto__ field pollute nothing', async () => {
    const Proto = defineEvent({ type: '__proto__', version: 1, subject: 'x.proto', schema: z.looseObject({ constructor: z.string() }) });
    const Ctor = defineEvent({ type: 'constructor', version: 1, subject: 'x.ctor', schema: z.object({}) });
    const p = createPublisher({ schema: db.schema, source: 'orders', contracts: defineContracts([Proto, Ctor]) });
    const key = randomUUID();
    const data = JSON.parse('{"constructor":"x","__proto__":{"polluted":true}}');
    await withTransaction(db.pool, (tx) =>
      p.publishMany(tx, [
        { key, type: '__proto__', data },
        { key, type: 'constructor', data: {} },
      ]),
    );
    assert.equal(({} as { polluted?: boolean }).polluted, undefined);
    const stored = await rows(key);
    assert.deepEqual(
      stored.map((r) => [r.type, r.headers['ce-dataschema']]),
      [
        ['__proto__', 'ferry:__proto__/v1'],
        ['constructor', 'ferry:constructor/v1'],
      ],
    );
    assert.equal(Object.hasOwn(stored[0]?.data as object, '__proto__'), true);
    // A type the registry lacks but Object.prototype has is still unknown.
    const err = await withTransaction(db.pool, (tx) =>
      p.publish(tx, { key, type: 'toString' as '__proto__', subject: 'a.b', data: {} } as never),
    ).catch((e: unknown) => e);
    assert.ok(isValidationError(err) && /has no contract/.test(err.message), String(err));
  });

  test('publisher - without contracts nothing is stamped, and the outbox still refuses other ce-* names and spellings', async () => {
    const key = randomUUID();
    const plain = createPublisher({ schema: db.schema, source: 'orders' });
    await withTransaction(db.pool, (tx) => plain.publish(tx, { key, subject: 'orders.placed', type: 'OrderPlaced', data: { any: 1 } }));
    assert.deepEqual((await rows(key))[0]?.headers, {});
    // The publish functions, called by hand (migration 000018): exactly the two contract headers pass.
    const call = (headers: Record<string, string>) =>
      db.pool.query(
        `SELECT * FROM ${s}.publish_event($1, $2, NULL, 'orders.placed', 'OrderPlaced', 'svc', 'application/json', '{}', $3, now(), NULL, false)`,
        [randomUUID(), key, JSON.stringify(headers)],
      );
    await call({ 'ce-dataschema': 'ferry:OrderPlaced/v2', 'ce-dataversion': '2' });
    // The short path of the header check (000018) passes only what the full check passes.
    await call({ 'ce-dataschema': 'ferry:OrderPlaced/v2', 'ce-dataversion': 'two' });
    await call({ 'ce-dataschema': 'ferry:OrderPlaced/v2', 'ce-dataversion': '2', tenant: 't1' });
    for (const [headers, why] of [
      [{ 'ce-dataschema': ' ferry:OrderPlaced/v2', 'ce-dataversion': '2' }, /starts or ends with whitespace/],
      [{ 'ce-dataschema': 'ferry:Order\u0007Placed/v2', 'ce-dataversion': '2' }, /control character/],
      [{ 'ce-dataschema': 'x'.repeat(4097), 'ce-dataversion': '2' }, /4097 characters; the limit is 4096/],
    ] as const) {
      await assert.rejects(call(headers), (e: Error & { column?: string }) => e.column === 'headers.ce-dataschema' && why.test(e.message));
    }
    for (const name of ['CE-DataSchema', 'ce-type', 'ce-dataschemax', 'Ce-Dataversion']) {
      await assert.rejects(call({ [name]: 'x' }), (e: Error & { column?: string }) => {
        assert.equal(e.column, `headers.${name}`);
        assert.match(e.message, /is reserved/);
        return true;
      });
    }
  });
});
