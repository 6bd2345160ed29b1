import assert from 'node:assert/strict';
import { after, afterEach, describe, test } from 'node:test';
import { type ContractEventMap, defineContracts, defineEvent } from '@ferry/contracts';
import { type FerryEvent, isValidationError } from '@ferry/core';
import { createInbox, type InboxEvent, type InboxOptions, listParked } from '@ferry/inbox';
import { waitFor } from '@ferry/testkit';
import { type } from 'arktype';
import { PgBoss } from 'pg-boss';
import * as v from 'valibot';
import { z } from 'zod';
import { ferryEvent, type InboxFixture, inboxFixture, publishEvents } from './inbox-support.js';

// Consuming by contract (issue 45): each event is checked against the contract it was published
// under and upcast to the handler's version; what cannot be is parked, never handed over.

const fixtures: InboxFixture[] = [];
const bosses: PgBoss[] = [];
async function release(): Promise<void> {
  for (const b of bosses.splice(0)) await b.stop({ graceful: false }).catch(() => {});
  for (const f of fixtures.splice(0)) await f.close();
}
afterEach(release);
after(release);

// Three validators, one per version, as teams that change libraries over a year would have.
const V1 = defineEvent({
  type: 'OrderPlaced',
  version: 1,
  subject: 'orders.placed',
  schema: v.object({ orderId: v.string(), total: v.number() }),
  upcast: (d) => {
    if (d.total < 0) throw new Error(`a negative total (${d.total}) has no currency to guess`);
    return { orderId: d.orderId, total: { amount: d.total, currency: 'EUR' } };
  },
});
const V2 = defineEvent({
  type: 'OrderPlaced',
  version: 2,
  subject: 'orders.placed',
  schema: z.object({ orderId: z.string(), total: z.object({ amount: z.number(), currency: z.string().length(3) }) }),
  upcast: (d) => ({ ...d, channel: d.orderId.startsWith('shop-') ? 'shop' : 'web' }),
});
const V3 = defineEvent({
  type: 'OrderPlaced',
  version: 3,
  subject: 'orders.placed',
  schema: type({ orderId: 'string', total: { amount: 'number', currency: 'string == 3' }, channel: "'web' | 'shop'" }),
});
const contracts = defineContracts([V1, V2, V3]);
type Placed = ContractEventMap<typeof contracts>['OrderPlaced'];

async function fixture(): Promise<InboxFixture> {
  const f = await inboxFixture();
  fixtures.push(f);
  return f;
}

/** An event as a publisher with contracts writes it: stamped with the contract of `version`, or unstamped (before contracts). */
function placed(f: InboxFixture, key: string, data: unknown, stamp?: Record<string, string>): FerryEvent {
  const event = ferryEvent(f.stream.prefix, { key, version: 1, type: 'OrderPlaced', data });
  return { ...event, headers: stamp ?? {} };
}
const stampOf = (version: number) => ({ 'ce-dataschema': `ferry:OrderPlaced/v${version}`, 'ce-dataversion': String(version) });

function contractInbox(f: InboxFixture, seen: Array<InboxEvent<'OrderPlaced', Placed>>, extra: Partial<InboxOptions> = {}) {
  return f.inbox({
    contracts,
    handlers: {
      OrderPlaced: async (event: InboxEvent<'OrderPlaced', Placed>) => {
        seen.push(event);
      },
    },
    ...extra,
  } as Partial<InboxOptions> & Pick<InboxOptions, 'handlers'>);
}

describe('inbox - contracts', () => {
  test('inbox - a stream of v1, v2 and v3 events reaches a v3 handler, each upcast step by step and checked', async () => {
    const f = await fixture();
    const seen: Array<InboxEvent<'OrderPlaced', Placed>> = [];
    const inbox = contractInbox(f, seen);
    await inbox.start();
    await publishEvents(f.stream.nc, [
      placed(f, 'legacy', { orderId: 'legacy', total: 10 }), // no stamp: published before contracts, so v1
      placed(f, 'a', { orderId: 'a', total: 12 }, stampOf(1)),
      placed(f, 'b', { orderId: 'shop-b', total: { amount: 20, currency: 'USD' } }, stampOf(2)),
      placed(f, 'c', { orderId: 'c', total: { amount: 30, currency: 'GBP' }, channel: 'shop' }, stampOf(3)),
      placed(f, 'd', { orderId: 'd', total: 40 }, { 'ce-dataversion': '1' }), // only the version header
    ]);
    await waitFor(() => seen.length === 5, { what: 'five events handled' });
    const byKey = new Map(seen.map((e) => [e.key, e]));
    assert.deepEqual(byKey.get('legacy')?.payload, { orderId: 'legacy', total: { amount: 10, currency: 'EUR' }, channel: 'web' });
    assert.deepEqual(byKey.get('a')?.contract, { version: 3, publishedVersion: 1 });
    assert.deepEqual(byKey.get('b')?.payload, { orderId: 'shop-b', total: { amount: 20, currency: 'USD' }, channel: 'shop' });
    assert.deepEqual(byKey.get('b')?.contract, { version: 3, publishedVersion: 2 });
    assert.deepEqual(byKey.get('c')?.contract, { version: 3, publishedVersion: 3 });
    assert.deepEqual(byKey.get('d')?.contract, { version: 3, publishedVersion: 1 });
    assert.equal(inbox.counts().parked, 0);
  });

  test('inbox - invalid data, an unknown version and a failing upcast are parked with their reason and never reach the handler', async () => {
    const f = await fixture();
    const seen: Array<InboxEvent<'OrderPlaced', Placed>> = [];
    const inbox = contractInbox(f, seen, { parkRetryLimit: 0 });
    await inbox.start();
    await publishEvents(
      f.stream.nc,
      [
        placed(f, 'bad-data', { orderId: 'x', total: { amount: 'ten', currency: 'EURO' } }, stampOf(2)),
        placed(f, 'too-new', { orderId: 'x' }, { 'ce-dataschema': 'ferry:OrderPlaced/v4', 'ce-dataversion': '4' }),
        placed(f, 'too-new-version', { orderId: 'x' }, { 'ce-dataversion': '7' }),
        placed(f, 'other-type', { orderId: 'x' }, { 'ce-dataschema': 'ferry:OrderCancelled/v1' }),
        placed(f, 'no-upcast', { orderId: 'x', total: -5 }, stampOf(1)),
        placed(f, 'bytes', { orderId: 'x', total: 1 }, { ...stampOf(1) }),
        placed(f, 'fine', { orderId: 'fine', total: 1 }, stampOf(1)),
      ].map((e) => (e.key === 'bytes' ? { ...e, contentType: 'application/octet-stream' } : e)),
    );
    await waitFor(() => inbox.counts().parked === 6 && seen.length === 1, { what: 'six parked, one applied' });
    assert.deepEqual(
      seen.map((e) => e.key),
      ['fine'],
    );
    const boss = new PgBoss({ connectionString: f.db.url, schema: f.bossSchema, supervise: false, schedule: false, max: 2 });
    boss.on('error', () => {});
    await boss.start();
    bosses.push(boss);
    const parked = new Map((await listParked({ boss, consumer: 'billing' })).map((p) => [p.key, p]));
    const expect: Array<[string, string, RegExp]> = [
      ['bad-data', 'invalid-data', /"OrderPlaced" v2 refused the data: total\.amount: .*; total\.currency: /],
      [
        'too-new',
        'unknown-version',
        /ce-dataschema "ferry:OrderPlaced\/v4" names no contract of "OrderPlaced" that this consumer knows \(this consumer knows "OrderPlaced" v1\.\.v3\)/,
      ],
      ['too-new-version', 'unknown-version', /"OrderPlaced" v7 is newer than this consumer knows/],
      ['other-type', 'unknown-version', /names no contract of "OrderPlaced"/],
      ['no-upcast', 'upcast-failed', /upcast of "OrderPlaced" v1 → v2 threw: a negative total \(-5\) has no currency to guess/],
      ['bytes', 'invalid-data', /its data must be JSON; this event's content type is "application\/octet-stream"/],
    ];
    for (const [key, reason, error] of expect) {
      const p = parked.get(key);
      assert.equal(p?.reason, reason, `${key}: ${JSON.stringify(p)}`);
      assert.match(p?.error ?? '', error, key);
    }
    // The park worker's retry goes through the same check: it fails again with the same words, and nothing is applied.
    await waitFor(async () => (await listParked({ boss, consumer: 'billing' })).filter((p) => p.state === 'failed').length === 6, {
      what: 'the six parked events failed in the parking lot',
    });
    const failed = await listParked({ boss, consumer: 'billing' });
    assert.match(failed.find((p) => p.key === 'bad-data')?.lastError ?? '', /refused the data: total\.amount/);
    assert.deepEqual(
      seen.map((e) => e.key),
      ['fine'],
    );
  });

  test('inbox - a validator that throws parks the event as invalid-data; hostile names stay data', async () => {
    const f = await fixture();
    const Throws = defineEvent({
      type: 'constructor',
      version: 1,
      schema: {
        '~standard': {
          version: 1,
          vendor: 'test',
          validate: (value: unknown) => {
            if ((value as { boom?: boolean }).boom) throw new TypeError('validator bug');
            return { value };
          },
        },
      },
    });
    const seen: InboxEvent[] = [];
    const inbox = f.inbox({
      contracts: defineContracts([Throws]),
      parkRetryLimit: 0,
      handlers: {
        constructor: async (event: InboxEvent) => {
          seen.push(event);
        },
      },
    } as Partial<InboxOptions> & Pick<InboxOptions, 'handlers'>);
    await inbox.start();
    const body = (json: string) => ({
      ...ferryEvent(f.stream.prefix, { key: 'k', version: 1, type: 'constructor', body: Buffer.from(json) }),
    });
    await publishEvents(f.stream.nc, [
      { ...body('{"boom":true}'), key: 'boom' },
      { ...body('{"__proto__":{"polluted":true},"constructor":"x"}'), key: 'proto' },
    ]);
    await waitFor(() => inbox.counts().parked === 1 && seen.length === 1, { what: 'one parked, one applied' });
    assert.equal(({} as { polluted?: boolean }).polluted, undefined);
    assert.equal(Object.hasOwn(seen[0]?.payload as object, '__proto__'), true);
    const park = f.reports.find((r) => r.kind === 'parked');
    assert.equal(park?.kind === 'parked' && park.reason, 'invalid-data');
    assert.match(
      park?.kind === 'parked' ? park.error : '',
      /the validator of "constructor" v1 threw instead of returning issues: validator bug/,
    );
  });

  test('inbox - createInbox refuses contracts that are not a registry and a handler whose type has no contract', async () => {
    const f = await fixture();
    const base = { pool: f.db.pool, nc: f.stream.nc, stream: f.stream.name, consumer: 'billing', schema: f.db.schema };
    assert.throws(
      () => createInbox({ ...base, contracts: { types: () => [] } as never, handlers: {} }),
      (e: unknown) => isValidationError(e) && e.field === 'contracts' && /defineContracts/.test(e.message),
    );
    assert.throws(
      () =>
        createInbox({
          ...base,
          contracts,
          handlers: { OrderPlaced: async () => {}, OrderShipped: async () => {} } as never,
        }),
      (e: unknown) =>
        isValidationError(e) &&
        e.field === 'handlers.OrderShipped' &&
        /the contracts have no "OrderShipped" \(they have "OrderPlaced"\)/.test(e.message),
    );
    // Typed from the registry: the handler's payload is v3's.
    createInbox({
      ...base,
      contracts,
      handlers: {
        OrderPlaced: async (event) => {
          const channel: 'web' | 'shop' = event.payload.channel;
          // @ts-expect-error v1's bare total is not what a v3 handler gets
          const total: number = event.payload.total;
          void channel;
          void total;
        },
      },
    });
  });
});
