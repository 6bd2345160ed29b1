import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { quoteIdentifier, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { type ConsoleServer, startConsole } from '@ferry/relay';
import { createTestDatabase, NatsServer, type TestDatabase, uniqueName } from '@ferry/testkit';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import type { BrowserContext } from 'playwright-core';
import { type Browser, launchChromium, logIn } from './chromium.js';
import { setFailed } from './delivery-state.js';
import { ferry } from './ops-helpers.js';

// Issue 44: the console's retry preview and `ferry dlq retry --dry-run` are one check
// (actions/retry-hazards.ts): a subject no stream binds and an event over the server's
// max_payload are both named, with the fix, in the terminal and in Chromium alike. The
// NATS server is this file's own, with a 4 KiB max_payload, so an 8 KiB event is over it.

const TOKEN = 'retry-preview-token-0123456789';

let db: TestDatabase;
let server: NatsServer;
let nc: NatsConnection;
let consoleServer: ConsoleServer;
let context: BrowserContext;
let browser: Browser;
let prefix: string;
let streamName: string;
const ids: Record<'big' | 'unbound' | 'fine', string> = { big: '', unbound: '', fine: '' };

before(async () => {
  server = await NatsServer.start({ config: 'max_payload: 4096' });
  nc = await connect({ servers: server.url });
  prefix = uniqueName('rp');
  streamName = prefix.toUpperCase();
  await (await jetstreamManager(nc)).streams.add({ name: streamName, subjects: [`${prefix}.bound.>`] });
  db = await createTestDatabase({ prefix: 'retry_preview', migrate: ['outbox'], max: 6 });
  const publisher = createPublisher({ schema: db.schema, source: 'retry-preview-test' });
  const [big, unbound, fine] = await withTransaction(db.pool, async (tx) =>
    publisher.publishMany(tx, [
      { subject: `${prefix}.bound.big`, key: 'big', type: 'Big', data: { blob: 'x'.repeat(8_000) } },
      { subject: `${prefix}.unbound.y`, key: 'unbound', type: 'Lost', data: {} },
      { subject: `${prefix}.bound.ok`, key: 'fine', type: 'Fine', data: {} },
    ]),
  );
  ids.big = big?.id ?? '';
  ids.unbound = unbound?.id ?? '';
  ids.fine = fine?.id ?? '';
  assert.equal(await setFailed(db.pool, db.schema, 'true', [], { attempts: 25, lastError: 'test: dead', dead: true }), 3);
  consoleServer = await startConsole({
    pool: db.pool,
    schema: db.schema,
    bossSchema: `${db.schema}_boss`,
    nc,
    host: '127.0.0.1',
    port: 0,
    readOnly: false,
    token: TOKEN,
    refreshMs: 5000,
  });
  browser = await launchChromium();
  context = browser.context;
  await logIn(context, consoleServer.url, TOKEN);
});

after(async () => {
  await browser?.close();
  await consoleServer?.close();
  await nc?.close().catch(() => {});
  await server?.stop();
  await db?.close();
});

interface Hazard {
  kind: string;
  events: number;
  subjects: string[];
  message: string;
  fix: string;
}

test('dlq retry preview - the CLI names an unbound subject and an event over max_payload, each with its fix, and exits 1', async () => {
  const r = await ferry([
    'dlq',
    'retry',
    '--all-failed',
    '--dry-run',
    '--json',
    '--nats-url',
    server.url,
    '--database-url',
    db.url,
    '--schema',
    db.schema,
  ]);
  assert.equal(r.code, 1, r.err);
  const out = r.json<{ wouldChange: string[]; hazards: Hazard[]; maxPayload: number }>();
  assert.deepEqual(out.wouldChange, [ids.big, ids.unbound, ids.fine]);
  assert.equal(out.maxPayload, 4096);
  assert.deepEqual(
    out.hazards.map((h) => ({ kind: h.kind, events: h.events, subjects: h.subjects })),
    [
      { kind: 'unbound-subject', events: 1, subjects: [`${prefix}.unbound.y`] },
      { kind: 'over-max-payload', events: 1, subjects: [] },
    ],
  );
  assert.match(out.hazards[0]?.fix ?? '', new RegExp(`ferry streams ensure STREAM=${prefix}\\.unbound\\.y`));
  assert.match(
    out.hazards[1]?.message ?? '',
    new RegExp(`^1 event encodes to more than the server's max_payload 4096 bytes \\(${ids.big}: \\d+\\)`),
  );
  assert.match(r.err, /2 events would fail again: no stream binds \S+\.unbound\.y; over the server's max_payload; fix that first/);
  // Nothing changed: the dry run is a preview.
  const { rows } = await db.pool.query(
    `SELECT count(*)::int AS n FROM ${quoteIdentifier(db.schema)}.outbox_pending WHERE dead_at IS NOT NULL`,
  );
  assert.equal(rows[0].n, 3);
});

test("dlq retry preview - the console's preview in Chromium names the same hazards with the same fixes, in retry's own words", async () => {
  const cli = (
    await ferry([
      'dlq',
      'retry',
      '--all-failed',
      '--dry-run',
      '--json',
      '--nats-url',
      server.url,
      '--database-url',
      db.url,
      '--schema',
      db.schema,
    ])
  ).json<{ hazards: Hazard[] }>().hazards;
  const page = await context.newPage();
  try {
    await page.goto(`${consoleServer.url}/events?subject=${encodeURIComponent(`${prefix}.>`)}`);
    await Promise.all([page.waitForURL(/\/dlq\/preview$/), page.locator('button[data-action=retry]').first().click()]);
    assert.equal(await page.locator('#count').textContent(), '3');
    const items = page.locator('#hazards li');
    assert.equal(await items.count(), 2);
    const shown = await items.evaluateAll((lis) => lis.map((li) => ({ kind: li.getAttribute('data-hazard'), text: li.textContent ?? '' })));
    for (const [n, h] of cli.entries()) {
      assert.equal(shown[n]?.kind, h.kind);
      assert.ok(shown[n]?.text.includes(h.message), `console shows "${h.message}"`);
      assert.ok(shown[n]?.text.includes(h.fix), `console shows the fix "${h.fix}"`);
    }
    assert.match((await page.locator('#hazards').textContent()) ?? '', /2 event\(s\) would fail again/);
    const body = (await page.locator('body').textContent()) ?? '';
    assert.doesNotMatch(body, /a discard keeps it/, 'no discard wording in a retry preview');
  } finally {
    await page.close();
  }
  // Once the subject is bound (Ferry's own command, as the fix says), only the size remains.
  const bound = await ferry(['streams', 'ensure', `${streamName}=${prefix}.unbound.y`, '--nats-url', server.url]);
  assert.equal(bound.code, 0, bound.err);
  const again = await context.newPage();
  try {
    await again.goto(`${consoleServer.url}/events?subject=${encodeURIComponent(`${prefix}.>`)}`);
    await Promise.all([again.waitForURL(/\/dlq\/preview$/), again.locator('button[data-action=retry]').first().click()]);
    assert.deepEqual(await again.locator('#hazards li').evaluateAll((lis) => lis.map((li) => li.getAttribute('data-hazard'))), [
      'over-max-payload',
    ]);
  } finally {
    await again.close();
  }
});
