// Type-level tests: this file is compiled by `tsc --build` with the rest of the
// suite, and each `@ts-expect-error` fails the build if the line it marks ever
// compiles. The runtime test only shows the well-typed form is usable.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createInbox, type Handlers, type InboxOptions } from '@ferry/inbox';
import pg from 'pg';

type OrderEvents = {
  OrderPlaced: { orderId: string; totalCents: number };
  OrderCancelled: { orderId: string; reason: string };
};

/** Well typed: each handler sees its own payload. */
export const handlers: Handlers<OrderEvents> = {
  OrderPlaced: async (event, { tx }) => {
    const cents: number = event.payload.totalCents;
    const type: 'OrderPlaced' = event.type;
    await tx.query('SELECT $1::int, $2::text', [cents, type]);
  },
  OrderCancelled: async (event) => {
    const reason: string = event.payload.reason;
    assert.ok(reason);
  },
};

export function wrongShapes(options: Omit<InboxOptions<OrderEvents>, 'handlers'>): void {
  createInbox<OrderEvents>({
    ...options,
    handlers: {
      OrderPlaced: async (event) => {
        // @ts-expect-error totalCents is a number, not a string
        const total: string = event.payload.totalCents;
        // @ts-expect-error OrderPlaced has no reason
        void event.payload.reason;
        void total;
      },
    },
  });
  createInbox<OrderEvents>({
    ...options,
    handlers: {
      // @ts-expect-error a handler that expects another payload shape does not fit OrderCancelled
      OrderCancelled: async (event: { payload: { orderId: number } }) => {
        void event;
      },
    },
  });
  // @ts-expect-error mode is one of latest | sequential | dedupe
  createInbox<OrderEvents>({ ...options, handlers: {}, mode: 'newest' });
}

/** Without an event map any type name is accepted and the payload is unknown. */
export function untyped(options: Omit<InboxOptions, 'handlers'>): void {
  createInbox({
    ...options,
    handlers: {
      Set: async (event, { tx }) => {
        const type: string = event.type;
        const payload: unknown = event.payload;
        await tx.query('SELECT $1::text', [type, payload]);
      },
    },
  });
}

test('inbox types - handlers are typed per event type from the user event map', () => {
  const pool = new pg.Pool({ max: 1 });
  const inbox = createInbox<OrderEvents>({
    pool,
    nc: { request: () => Promise.reject(new Error('unused')) } as never,
    stream: 'ORDERS',
    consumer: 'billing',
    handlers,
  });
  assert.equal(inbox.parkQueue, 'ferry.inbox.billing.parked');
  assert.equal(inbox.state, 'idle');
  void pool.end();
});
