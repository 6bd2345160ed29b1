import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { defineContracts, defineEvent } from '@ferry/contracts';
import { migrate, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { type ConsoleServer, startConsole } from '@ferry/relay';
import { waitFor } from '@ferry/testkit';
import * as v from 'valibot';
import { type Browser, launchChromium, logIn } from './chromium.js';
import { ferryEvent, type InboxFixture, inboxFixture, publishEvents } from './inbox-support.js';

// Issue 45 in the console (real Chromium, real PostgreSQL and NATS): an event's page shows the
// contract it was published under and its version; an event its contract refused in the inbox is
// on the parked page with reason invalid-data and the validator's issues.

const TOKEN = 'console-contracts-token-0123456789';

const V1 = defineEvent({
  type: 'OrderPlaced',
  version: 1,
  subject: 'orders.placed',
  schema: v.object({ orderId: v.string(), totalCents: v.number() }),
  upcast: (d) => ({ orderId: d.orderId, total: { amountCents: d.totalCents, currency: 'EUR' } }),
});
const V2 = defineEvent({
  type: 'OrderPlaced',
  version: 2,
  subject: 'orders.placed',
  schema: v.object({ orderId: v.string(), total: v.object({ amountCents: v.number(), currency: v.string() }) }),
});
const contracts = defineContracts([V1, V2]);

let fx: InboxFixture;
let consoleServer: ConsoleServer;
let browser: Browser;
const ids: Record<string, string> = {};

before(async () => {
  fx = await inboxFixture();
  await migrate({ pool: fx.db.pool, schema: fx.db.schema, set: 'outbox' });
  const withContracts = createPublisher({ schema: fx.db.schema, source: 'orders', contracts });
  const plain = createPublisher({ schema: fx.db.schema, source: 'orders' });
  await withTransaction(fx.db.pool, async (tx) => {
    ids.v2 = (
      await withContracts.publish(tx, {
        key: 'o-1',
        type: 'OrderPlaced',
        data: { orderId: 'o-1', total: { amountCents: 5, currency: 'EUR' } },
      })
    ).id;
    ids.v1 = (
      await withContracts.publish(tx, { key: 'o-2', type: 'OrderPlaced', contractVersion: 1, data: { orderId: 'o-2', totalCents: 7 } })
    ).id;
    ids.plain = (await plain.publish(tx, { key: 'o-3', subject: 'orders.placed', type: 'OrderPlaced', data: {} })).id;
  });
  const inbox = fx.inbox({ contracts, parkRetryLimit: 0, handlers: { OrderPlaced: async () => {} } });
  await inbox.start();
  const bad = ferryEvent(fx.stream.prefix, {
    key: 'o-bad',
    version: 1,
    type: 'OrderPlaced',
    data: { orderId: 'o-bad', total: { amountCents: 'five' } },
  });
  await publishEvents(fx.stream.nc, [{ ...bad, headers: { 'ce-dataschema': 'ferry:OrderPlaced/v2', 'ce-dataversion': '2' } }]);
  await waitFor(() => inbox.counts().parked === 1, { what: 'the invalid event parked' });
  consoleServer = await startConsole({
    pool: fx.db.pool,
    schema: fx.db.schema,
    bossSchema: fx.bossSchema,
    nc: fx.stream.nc,
    host: '127.0.0.1',
    port: 0,
    readOnly: true,
    token: TOKEN,
    refreshMs: 1000,
  });
  browser = await launchChromium();
  await logIn(browser.context, consoleServer.url, TOKEN);
});

after(async () => {
  await browser?.close();
  await consoleServer?.close();
  await fx?.close();
});

describe('ferry console: event contracts, in Chromium', () => {
  test('console contracts - an event page shows its contract and version; a plain event says it has none', async () => {
    const page = await browser.context.newPage();
    const field = async (id: string | undefined, name: string) => {
      await page.goto(`${consoleServer.url}/event?id=${id}`);
      return (await page.textContent(`td[data-field="${name}"]`))?.trim();
    };
    assert.equal(await field(ids.v2, 'contract'), 'ferry:OrderPlaced/v2');
    assert.equal(await field(ids.v2, 'contract version'), '2');
    assert.equal(await field(ids.v1, 'contract'), 'ferry:OrderPlaced/v1');
    assert.equal(await field(ids.v1, 'contract version'), '1');
    assert.equal(await field(ids.plain, 'contract'), 'none (published without contracts)');
    assert.equal(await field(ids.plain, 'contract version'), '-');
    await page.close();
  });

  test('console contracts - the parked page shows an event its contract refused, with reason invalid-data and the issues', async () => {
    const page = await browser.context.newPage();
    await page.goto(`${consoleServer.url}/parked?consumer=billing`);
    const text = (await page.textContent('main')) ?? (await page.textContent('body')) ?? '';
    assert.match(text, /o-bad/);
    assert.match(text, /invalid-data/);
    assert.match(text, /"OrderPlaced" v2 refused the data: total\.amountCents: .*total\.currency: /);
    await page.close();
  });
});
