import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { bossSchemaFor, encodeEvent, quoteIdentifier, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { type ConsoleServer, startConsole } from '@ferry/relay';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import { AckPolicy } from '@nats-io/jetstream';
import { PgBoss } from 'pg-boss';
import type { BrowserContext, Page } from 'playwright-core';
import { type Browser, launchChromium, logIn } from './chromium.js';
import { consoleCall } from './console-call.js';
import { setFailed } from './delivery-state.js';
import { ferry } from './ops-helpers.js';

// Issue 44, item 3, in Chromium: the console says why its actions are off, shows only this schema's
// streams unless asked, says "discarded at", records the operator's name with a shared token, marks
// the rows behind a failed head as waiting, links a parked event to its event page, adds a subject
// to a stream with a preview and an audit record, and its --help lists only what it uses.

const TOKEN = 'console-says-token-0123456789';

let db: TestDatabase;
let ours: TestStream;
let foreign: TestStream;
let browser: Browser;
let context: BrowserContext;
/** A console with a token (actions on once logged in), one without credentials, one read-only. */
let acting: ConsoleServer;
let bare: ConsoleServer;
let readOnly: ConsoleServer;
let s: string;
const ids = { discarded: '', head: '', behind: '', parked: randomUUID() };

before(async () => {
  db = await createTestDatabase({ prefix: 'console_says', migrate: [] });
  await db.pool.query(`DROP SCHEMA ${quoteIdentifier(db.schema)}`);
  s = quoteIdentifier(db.schema);
  const base = ['--database-url', db.url, '--schema', db.schema];
  for (const args of [
    ['migrate', ...base, '--lanes', '2'],
    ['migrate', ...base, '--inbox', '--boss'],
  ]) {
    const r = await ferry(args);
    assert.equal(r.code, 0, r.err);
  }
  ours = await createTestStream({ prefix: 'says' });
  // Another application's stream on the same server, its consumer far behind: not this console's business.
  foreign = await createTestStream({ prefix: 'saysother' });
  await foreign.jsm.consumers.add(foreign.name, { durable_name: 'their_app', ack_policy: AckPolicy.Explicit });
  for (let i = 0; i < 1_100; i++) foreign.nc.publish(`${foreign.prefix}.x`, new Uint8Array(1));
  await foreign.nc.flush();
  await waitFor(async () => (await foreign.jsm.streams.info(foreign.name)).state.messages === 1_100, { what: 'the foreign backlog' });
  await ours.jsm.consumers.add(ours.name, { durable_name: 'ours', ack_policy: AckPolicy.Explicit });

  const publisher = createPublisher({ schema: db.schema, source: 'console-says' });
  const rows = await withTransaction(db.pool, (tx) =>
    publisher.publishMany(tx, [
      { subject: `${ours.prefix}.a`, key: 'gone', type: 'Gone', data: {} },
      { subject: `${ours.prefix}.a`, key: 'held', type: 'Held', data: {} },
      { subject: `${ours.prefix}.a`, key: 'held', type: 'Held', data: {} },
    ]),
  );
  [ids.discarded, ids.head, ids.behind] = rows.map((r) => r.id) as [string, string, string];
  await setFailed(db.pool, db.schema, 'o.id = ANY($1::uuid[])', [[ids.discarded, ids.head]], {
    attempts: 3,
    lastError: 'test: refused',
    dead: true,
  });
  const discarded = await ferry(['dlq', 'discard', ids.discarded, '--yes', ...base]);
  assert.equal(discarded.code, 0, discarded.err);

  // One parked event of consumer billing, as the inbox writes it, with the event's real headers.
  const event = {
    id: ids.parked,
    key: 'p-1',
    version: 1n,
    subject: `${ours.prefix}.a`,
    type: 'Parked',
    source: 'console-says',
    time: new Date(),
    contentType: 'application/json',
    data: new TextEncoder().encode('{}'),
    headers: {},
  };
  const boss = new PgBoss({ connectionString: db.url, schema: bossSchemaFor(db.schema), max: 1, supervise: false, schedule: false });
  await boss.start();
  try {
    await boss.createQueue('ferry.inbox.billing.parked', { policy: 'key_strict_fifo', retryLimit: 0 });
    const enc = encodeEvent(event);
    await boss.send(
      'ferry.inbox.billing.parked',
      {
        format: 1,
        consumer: 'billing',
        mode: 'latest',
        stream: ours.name,
        streamSeq: 1,
        natsSubject: enc.subject,
        headers: enc.headers,
        body: Buffer.from(enc.body).toString('base64'),
        reason: 'handler-failed',
        error: 'Error: the ledger is down',
        parkedAt: new Date().toISOString(),
        deliveries: 5,
        id: ids.parked,
        key: 'p-1',
        version: '1',
        type: 'Parked',
      },
      { singletonKey: 'p-1' },
    );
  } finally {
    await boss.stop({ graceful: false, close: true });
  }

  const common = {
    pool: db.pool,
    schema: db.schema,
    bossSchema: bossSchemaFor(db.schema),
    nc: ours.nc,
    host: '127.0.0.1',
    port: 0,
    refreshMs: 1000,
    pace: 10,
  };
  acting = await startConsole({ ...common, readOnly: false, token: TOKEN, operator: 'ops-default' });
  bare = await startConsole({ ...common, readOnly: false });
  readOnly = await startConsole({ ...common, readOnly: true, token: TOKEN });
  browser = await launchChromium();
  context = browser.context;
});

after(async () => {
  await browser?.close();
  for (const c of [acting, bare, readOnly]) await c?.close();
  await ours?.close();
  await foreign?.close();
  await db?.pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(bossSchemaFor(db.schema))} CASCADE`).catch(() => {});
  await db?.close();
});

async function open(url: string): Promise<Page> {
  const page = await context.newPage();
  await page.goto(url);
  return page;
}

/** The CSRF token a bearer-token caller's pages carry (its forms post it back). */
async function csrfOf(server: ConsoleServer): Promise<string> {
  const page = await consoleCall(server.url, TOKEN, 'GET', '/streams');
  return /name="csrf" value="([^"]*)"/.exec(page.body)?.[1] ?? '';
}

const text = async (page: Page, selector: string) => ((await page.locator(selector).first().textContent()) ?? '').replace(/\s+/g, ' ');

test('console says - with actions off, every page says why and how to turn them on, and no action text dangles', async () => {
  const events = `/events?key=gone`;
  for (const [server, why] of [
    [bare, /no token or credentials.*--token-file FILE.*--basic-auth-file FILE/],
    [readOnly, /read-only \(started with --read-only\)/],
    [acting, /until you log in/],
  ] as const) {
    for (const path of ['/', '/blocked', events, '/parked', '/streams']) {
      const page = await open(`${server.url}${path}`);
      try {
        assert.match(await text(page, '#actions-off'), why, `${path}`);
        const body = await text(page, 'main');
        assert.doesNotMatch(body, /matching this filter:\s*(\(|$)/, `${path}: no sentence without its button`);
        assert.equal(await page.locator('form[action$="/preview"]').count(), 0, `${path}: no action offered`);
      } finally {
        await page.close();
      }
    }
  }
  assert.doesNotMatch(await text(await open(`${bare.url}/`), 'header'), /no credentials configured/);
});

test('console says - the overview and the Streams page show this schema’s streams and consumers; a toggle shows every one, and another app’s lag is never flagged', async () => {
  const page = await open(`${acting.url}/`);
  try {
    // The first snapshot may still be reading when the page is served: the page fills in by itself.
    await waitFor(async () => (await page.locator('table.consumers tr[data-stream]').count()) > 0, {
      what: 'the consumers table',
      timeoutMs: 30_000,
    });
    const shown = await page
      .locator('table.consumers tr[data-stream]')
      .evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-stream')));
    assert.deepEqual(shown, [ours.name]);
    assert.match(await text(page, '#scope'), /other stream\(s\) hidden/);
    await Promise.all([page.waitForURL(/all=1/), page.click('#scope a')]);
    const foreignRow = page.locator(`table.consumers tr[data-stream="${foreign.name}"]`);
    assert.equal(await foreignRow.count(), 1, 'shown with the toggle');
    assert.doesNotMatch((await foreignRow.getAttribute('class')) ?? '', /bad/, '1,100 behind, but not ours: not red');
    assert.match(await text(page, '#scope'), /Every stream and consumer on the server/);
  } finally {
    await page.close();
  }
  const streams = await open(`${acting.url}/streams`);
  try {
    assert.deepEqual(
      await streams.locator('table.streams tr[data-stream]').evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-stream'))),
      [ours.name],
    );
    await streams.goto(`${acting.url}/streams?all=1`);
    assert.equal(await streams.locator(`table.streams tr[data-stream="${foreign.name}"]`).count(), 1);
  } finally {
    await streams.close();
  }
});

test('console says - a discarded event says "discarded at"; the rows behind a failed head are marked waiting behind it; a parked event links to its event page', async () => {
  const discarded = await open(`${acting.url}/event?id=${ids.discarded}`);
  try {
    assert.equal(await text(discarded, 'td[data-field="state"]'), 'discarded');
    assert.match(await text(discarded, 'td[data-field="discarded at"]'), /^\d{4}-\d\d-\d\dT/);
    assert.equal(await discarded.locator('td[data-field="published at"]').count(), 0);
  } finally {
    await discarded.close();
  }
  const behind = await open(`${acting.url}/event?id=${ids.behind}`);
  try {
    assert.equal(await text(behind, `tr[data-id="${ids.behind}"] td:nth-child(7)`), 'waiting behind v1 (dead)');
    assert.equal(await text(behind, `tr[data-id="${ids.head}"] td:nth-child(7)`), 'dead');
  } finally {
    await behind.close();
  }
  const parked = await open(`${acting.url}/parked?consumer=billing`);
  try {
    await Promise.all([parked.waitForURL(/\/event\?id=/), parked.locator(`a[href="/event?id=${ids.parked}"]`).click()]);
  } finally {
    await parked.close();
  }
});

test('console says - a name typed at login (or --operator) is recorded with the token as a claim; a bad name is refused', async () => {
  const page = await open(`${acting.url}/login`);
  try {
    assert.equal(await page.inputValue('input[name=operator]'), 'ops-default', '--operator fills the field');
    assert.match(await text(page, 'main'), /recorded with your actions in the audit trail, as your claim/);
    await page.fill('input[name=token]', TOKEN);
    await page.fill('input[name=operator]', '<b>eve</b>');
    await page.click('button[type=submit]');
    assert.match(await text(page, '.advice'), /Not logged in: "<b>eve<\/b>" is not an operator name/);
  } finally {
    await page.close();
  }
  await logIn(context, acting.url, TOKEN, 'alice');
  const home = await open(`${acting.url}/`);
  assert.match(await text(home, 'header .who'), /as alice \(token\)/);
  await home.close();
  // A bearer request carries no form: --operator names it.
  const viaApi = await consoleCall(acting.url, TOKEN, 'POST', '/dlq/preview', {
    csrf: await csrfOf(acting),
    action: 'retry',
    id: ids.head,
  });
  assert.equal(viaApi.status, 200);
  assert.match(viaApi.body, /as ops-default \(token\)/);
});

test('console says - the Streams page adds a subject to a stream after a preview, and the audit trail records who', async () => {
  const subject = `${ours.prefix}_late.orders`;
  const page = await open(`${acting.url}/streams?subject=${encodeURIComponent(subject)}`);
  try {
    const row = page.locator(`table.streams tr[data-stream="${ours.name}"]`);
    assert.equal(await row.locator('input[name=subject]').inputValue(), subject, 'the fix link fills the subject');
    await Promise.all([page.waitForURL(/\/streams\/preview$/), row.locator('button[data-action=add-subject]').click()]);
    assert.match(
      await text(page, '#summary'),
      new RegExp(`stream ${ours.name} exists: would add the subject\\(s\\) it lacks \\(${subject}\\); none removed`),
    );
    assert.deepEqual((await ours.jsm.streams.info(ours.name)).config.subjects, [`${ours.prefix}.>`], 'a preview changes nothing');
    await Promise.all([page.waitForURL(/\/streams\/apply$/), page.click('#confirm')]);
    assert.match(await text(page, '#result'), /added the subject\(s\) it lacked/);
  } finally {
    await page.close();
  }
  assert.deepEqual((await ours.jsm.streams.info(ours.name)).config.subjects, [`${ours.prefix}.>`, subject]);
  const { rows } = await db.pool.query<{ actor: string; via: string; filter: Record<string, unknown>; rows: number; outcome: string }>(
    `SELECT actor, via, filter, rows, outcome FROM ${s}.operator_actions WHERE action = 'streams.ensure'`,
  );
  assert.deepEqual(rows, [
    {
      actor: 'alice (token)',
      via: 'console',
      filter: { stream: ours.name, subjects: [subject], created: false, added: [subject] },
      rows: 1,
      outcome: 'ok',
    },
  ]);
  // A subject another stream binds is refused at the preview, with no confirm button.
  const taken = await consoleCall(acting.url, TOKEN, 'POST', '/streams/preview', {
    csrf: await csrfOf(acting),
    stream: ours.name,
    subject: `${foreign.prefix}.x`,
  });
  assert.equal(taken.status, 200);
  assert.match(taken.body, new RegExp(`Stream ${foreign.name} already binds`));
  assert.doesNotMatch(taken.body, /id="confirm"/);
  const hostile = await consoleCall(acting.url, TOKEN, 'POST', '/streams/preview', {
    csrf: await csrfOf(acting),
    stream: ours.name,
    subject: '$JS.API.STREAM.DELETE.X',
  });
  assert.equal(hostile.status, 400);
  assert.match(hostile.body, /which NATS reserves/);
});

test('ferry console --help lists only what the console uses', async () => {
  const r = await ferry(['console', '--help']);
  assert.equal(r.code, 0);
  for (const flag of ['--token-file', '--operator', '--read-only', '--nats-url', '--database-url'])
    assert.match(r.out, new RegExp(`${flag}\\b`));
  for (const flag of ['--max-attempts', '--backoff-base-ms', '--publish-timeout-ms', '--poll-interval-ms', '--json'])
    assert.doesNotMatch(r.out, new RegExp(`${flag}\\b`));
});
