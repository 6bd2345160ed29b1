/**
 * The demo's event contracts: the one module the orders service (publisher)
 * and billing (inbox) share, and the one `ferry contracts check` reads in CI
 * against `apps/example/contracts.snapshot.json`.
 *
 * OrderPlaced v1 carried a bare `totalCents`; v2 carries the total with its
 * currency. v1 events published before the change are still in the stream:
 * v1's upcaster brings each to v2, so billing's handler sees only v2.
 */
import { defineContracts, defineEvent } from '@ferry/contracts';
import { toJsonSchema } from '@valibot/to-json-schema';
import * as v from 'valibot';

/**
 * A contract's validator and the JSON Schema of its data. valibot 1.x has no Standard JSON
 * Schema export, so `ferry contracts snapshot`, `check` and `asyncapi` read this one.
 */
const data = <S extends v.GenericSchema>(schema: S) => ({
  schema,
  jsonSchema: toJsonSchema(schema, { target: 'draft-2020-12' }) as Record<string, unknown>,
});

/** The fields both versions share. */
const order = {
  orderId: v.pipe(v.string(), v.uuid()),
  customer: v.pipe(v.string(), v.minLength(1)),
};

export const OrderPlacedV1 = defineEvent({
  type: 'OrderPlaced',
  version: 1,
  subject: 'demo.orders.placed',
  description: 'A customer placed an order (total in euro cents).',
  ...data(
    v.object({
      ...order,
      totalCents: v.pipe(v.number(), v.integer(), v.minValue(1)),
    }),
  ),
  upcast: (d) => ({ orderId: d.orderId, customer: d.customer, total: { amountCents: d.totalCents, currency: 'EUR' } }),
});

export const OrderPlacedV2 = defineEvent({
  type: 'OrderPlaced',
  version: 2,
  subject: 'demo.orders.placed',
  description: 'A customer placed an order.',
  ...data(
    v.object({
      ...order,
      total: v.object({
        amountCents: v.pipe(v.number(), v.integer(), v.minValue(1)),
        currency: v.pipe(v.string(), v.regex(/^[A-Z]{3}$/)),
      }),
    }),
  ),
});

export const contracts = defineContracts([OrderPlacedV1, OrderPlacedV2]);
export default contracts;
