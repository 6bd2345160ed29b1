import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { FERRY_RELEASE, grantsSql, quoteIdentifier, withTransaction } from '@ferry/core';
import { createInbox, type Inbox } from '@ferry/inbox';
import { createPublisher } from '@ferry/publisher';
import { type ConsoleServer, createRelay, type Relay, startConsole } from '@ferry/relay';
import { createTestDatabase, createTestStream, freePort, natsUrl, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import { type BrowserContext, chromium, type Page } from 'playwright-core';
import { markPublished, setFailed } from './delivery-state.js';
import { ferryEvent, publishEvents as publishToStream } from './inbox-support.js';
import { ferry } from './ops-helpers.js';
import { FERRY_BIN, readStream } from './relay-helpers.js';

// The operator console in a real Chromium (Debian's package, driven by playwright-core) against the
// real PostgreSQL and NATS: a relay publishes, an inbox consumes and parks, and the console is used
// the way an operator would, by clicking. The screenshots in docs/console.md are made here.

const CHROMIUM = process.env.FERRY_CHROMIUM ?? '/usr/bin/chromium';
// The screenshots go to docs/ only when asked (FERRY_UPDATE_SCREENSHOTS=1): a test run leaves the tree as it found it.
const SHOTS =
  process.env.FERRY_UPDATE_SCREENSHOTS === '1'
    ? fileURLToPath(new URL('../../docs/', import.meta.url))
    : mkdtempSync(join(tmpdir(), 'ferry-console-shots-'));
const TOKEN = 'console-test-token-0123456789';

let db: TestDatabase;
let stream: TestStream;
let inboxStream: TestStream;
let relay: Relay;
let inbox: Inbox;
let consoleServer: ConsoleServer;
let context: BrowserContext;
let userDataDir: string;
let s: string;
/** A subject no stream covers: its events fail with no_responders and (maxAttempts 1) go dead. */
let unrouted: string;
let failParked = true;
const applied: string[] = [];

const publisher = () => createPublisher({ schema: db.schema, source: 'console-test' });

async function publish(events: Array<{ subject: string; key: string; type: string; data?: unknown }>): Promise<string[]> {
  const p = publisher();
  return withTransaction(db.pool, async (tx) =>
    (
      await p.publishMany(
        tx,
        events.map((e) => ({ data: {}, ...e })),
      )
    ).map((r) => r.id),
  );
}

async function deadIds(where = 'true'): Promise<string[]> {
  const { rows } = await db.pool.query<{ id: string }>(
    `SELECT id::text AS id FROM ${s}.outbox_events WHERE dead_at IS NOT NULL AND published_at IS NULL AND ${where} ORDER BY seq`,
  );
  return rows.map((r) => r.id);
}

before(async () => {
  db = await createTestDatabase({ prefix: 'console', lanes: 2, migrate: ['outbox', 'inbox'], max: 8 });
  s = quoteIdentifier(db.schema);
  stream = await createTestStream({ prefix: 'console' });
  inboxStream = await createTestStream({ prefix: 'console_in' });
  unrouted = `nostream_${stream.prefix}`;
  relay = createRelay({
    databaseUrl: db.url,
    schema: db.schema,
    nats: { servers: natsUrl() },
    maxAttempts: 1,
    pollIntervalMs: 100,
    maintenance: false,
  });
  await relay.start();
  inbox = createInbox({
    pool: db.pool,
    nc: inboxStream.nc,
    stream: inboxStream.name,
    consumer: 'billing',
    schema: db.schema,
    bossSchema: `${db.schema}_boss`,
    mode: 'latest',
    maxDeliver: 1,
    parkRetryLimit: 0,
    retrySpanMs: 0, // fail the parked head at once, not after the default 15 minutes
    parkPollIntervalMs: 500,
    backoffMs: [50],
    handlers: {
      Charge: async (event) => {
        if (failParked) throw new Error('payment gateway down');
        applied.push(`${event.key}/${event.version}`);
      },
    },
  });
  await inbox.start();
  consoleServer = await startConsole({
    pool: db.pool,
    schema: db.schema,
    bossSchema: `${db.schema}_boss`,
    nc: stream.nc,
    host: '127.0.0.1',
    port: 0,
    readOnly: false,
    token: TOKEN,
    refreshMs: 1000,
    // These tests wait for the overview to show a change: read again after 10x the last status read,
    // not the default 150x (on this loaded machine a tiny schema's status read takes up to 0.8 s beside
    // the freeze test, which made the numbers 2 minutes old). The pacing itself is the bench's subject.
    pace: 10,
  });
  userDataDir = mkdtempSync(join(tmpdir(), 'ferry-console-chromium-'));
  // A fresh profile of this run's own: nothing cached or remembered from another run.
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1280, height: 900 },
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  // Log in once through the form: the session cookie serves every later page of the context.
  const page = await context.newPage();
  await page.goto(`${consoleServer.url}/login`);
  await page.fill('input[name=token]', TOKEN);
  await Promise.all([page.waitForURL(`${consoleServer.url}/`), page.click('button[type=submit]')]);
  await page.close();
});

after(async () => {
  await context?.close().catch(() => {});
  if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
  if (process.env.FERRY_UPDATE_SCREENSHOTS !== '1') rmSync(SHOTS, { recursive: true, force: true });
  await consoleServer?.close();
  await inbox?.stop().catch(() => {});
  await relay?.stop().catch(() => {});
  await inboxStream?.close();
  await stream?.close();
  await db?.pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(`${db.schema}_boss`)} CASCADE`).catch(() => {});
  await db?.close();
});

/** A page that records every script error, dialog and CSP violation it sees. */
async function watchedPage(): Promise<{ page: Page; problems: string[] }> {
  const page = await context.newPage();
  const problems: string[] = [];
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  page.on('dialog', (d) => {
    problems.push(`dialog: ${d.message()}`);
    void d.dismiss();
  });
  page.on('console', (m) => {
    // An error status the test asked for (403, 409) is logged as a failed load: not a problem of the page.
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) problems.push(`console: ${m.text()}`);
  });
  return { page, problems };
}

/**
 * Waits until the element's text passes `ok`, read from the page as it is now (no reload): the live
 * refresh has to bring it. Polled from here, since the console's CSP forbids the eval a string predicate needs.
 */
async function showsText(page: Page, selector: string, ok: (text: string) => boolean, what: string): Promise<void> {
  // The console reads its shared numbers again after the refresh interval or 10x (pace, above) the last
  // status read's time, whichever is longer: on a loaded machine that is several seconds.
  await waitFor(async () => ok((await page.textContent(selector, { timeout: 1000 }).catch(() => null)) ?? ''), {
    what,
    timeoutMs: 30_000,
    intervalMs: 100,
  });
}

describe('ferry console in Chromium', () => {
  test('console - a key blocked by an unroutable head shows as blocked with its reason; discarding it unblocks it and its later versions reach the stream in order', async () => {
    const [head] = await publish([{ subject: `${unrouted}.orders`, key: 'stuck', type: 'OrderPlaced' }]);
    await publish([
      { subject: `${stream.prefix}.orders`, key: 'stuck', type: 'OrderPaid' },
      { subject: `${stream.prefix}.orders`, key: 'stuck', type: 'OrderShipped' },
      { subject: `${stream.prefix}.orders`, key: 'healthy', type: 'OrderPlaced' },
    ]);
    await waitFor(async () => (await deadIds()).includes(head as string), { what: 'the unroutable head to go dead', timeoutMs: 20_000 });

    const { page: overview, problems } = await watchedPage();
    await overview.goto(`${consoleServer.url}/`);
    // The overview's numbers are one shared snapshot, read again once per refresh: it shows the dead row within one.
    await showsText(overview, '[data-card=dead] b', (t) => t === '1', 'the overview to count 1 dead event');
    assert.match((await overview.textContent('#live')) ?? '', /1 dead event\(s\) block their keys/);
    await overview.screenshot({ path: join(SHOTS, 'console-overview.png'), fullPage: true });

    const { page } = await watchedPage();
    await page.goto(`${consoleServer.url}/blocked`);
    const row = page.locator('tr[data-key="stuck"]');
    assert.match((await row.locator('td.reason').textContent()) ?? '', /no_responders/);
    assert.equal(await row.locator('td.waiting').textContent(), '2');
    await page.screenshot({ path: join(SHOTS, 'console-blocked.png'), fullPage: true });

    await row.locator('button[data-action=discard]').click();
    await page.waitForURL('**/dlq/preview');
    assert.equal(await page.textContent('#count'), '1');
    assert.equal(await page.textContent('#behind'), '2');
    assert.match((await page.textContent('#summary')) ?? '', /discards 1 dead event\(s\) of key stuck; 2 row\(s\) behind them will flow/);
    await page.click('#confirm');
    await page.waitForURL('**/dlq/apply');
    assert.equal(await page.textContent('#done'), '1');

    const events = await waitFor(
      async () => {
        const all = await readStream(stream.nc, stream.name);
        const stuck = all.filter((e) => e.key === 'stuck');
        return stuck.length === 2 ? stuck : undefined;
      },
      { what: 'versions 2 and 3 of key stuck on the stream', timeoutMs: 20_000 },
    );
    assert.deepEqual(
      events.map((e) => e.version),
      [2n, 3n],
      'in version order',
    );
    // The overview, never reloaded, refreshed itself: no dead event left.
    await showsText(overview, '[data-card=dead] b', (t) => t === '0', 'the overview, never reloaded, to count 0 dead events');
    assert.deepEqual(problems, [], 'no script error, dialog or CSP violation');
    const { rows } = await db.pool.query<{ filter: { previewDigest?: unknown; changed?: unknown } }>(
      `SELECT actor, via, action, filter, rows, outcome FROM ${s}.operator_actions WHERE via = 'console'`,
    );
    const digest = String(rows[0]?.filter.previewDigest);
    assert.match(digest, /^[0-9a-f]{64}$/, "the confirmation carried the preview's selection digest");
    assert.deepEqual(rows[0]?.filter.changed, { rows: 1, digest, ids: [head] }, 'the audit names the row discarded');
    delete rows[0]?.filter.previewDigest;
    delete rows[0]?.filter.changed;
    assert.deepEqual(rows, [
      {
        actor: 'token',
        via: 'console',
        action: 'dlq.discard',
        filter: { key: 'stuck', state: 'failed', previewed: 1 },
        rows: 1,
        outcome: 'ok',
      },
    ]);
    await overview.close();
    await page.close();
  });

  test('console - a filter-wide discard previews the exact count, refuses when the selection changed, then discards exactly those rows', async () => {
    const bulk = await publish(
      Array.from({ length: 5 }, (_, i) => ({ subject: `${unrouted}.bulk`, key: `bulk${i}`, type: 'BulkImported' })),
    );
    const others = await publish(
      Array.from({ length: 2 }, (_, i) => ({ subject: `${unrouted}.bulk`, key: `other${i}`, type: 'OtherThing' })),
    );
    await waitFor(async () => (await deadIds()).length === 7, { what: 'the 7 unroutable events to go dead', timeoutMs: 20_000 });

    const { page, problems } = await watchedPage();
    await page.goto(`${consoleServer.url}/events?type=BulkImported&state=dead`);
    assert.equal(await page.locator('table.events tr[data-id]').count(), 5);
    await page.click('button:has-text("Discard all matching dead")');
    await page.waitForURL('**/dlq/preview');
    assert.equal(await page.textContent('#count'), '5');
    // Someone discards one of them from the CLI meanwhile: the confirmation no longer matches, nothing changes.
    const cli = await ferry(['dlq', 'discard', bulk[0] as string, '--yes', '--database-url', db.url, '--schema', db.schema]);
    assert.equal(cli.code, 0, cli.err);
    await page.click('#confirm');
    assert.match((await page.textContent('#error')) ?? '', /the preview selected 5 failed row\(s\), now 4 match/);
    assert.equal((await deadIds(`type = 'BulkImported'`)).length, 4, 'nothing changed');

    await page.goto(`${consoleServer.url}/events?type=BulkImported&state=dead`);
    await page.click('button:has-text("Discard all matching dead")');
    await page.waitForURL('**/dlq/preview');
    assert.equal(await page.textContent('#count'), '4');
    await page.click('#confirm');
    await page.waitForURL('**/dlq/apply');
    assert.equal(await page.textContent('#done'), '4');
    assert.deepEqual(await deadIds(`type = 'BulkImported'`), []);
    assert.deepEqual(await deadIds(`type = 'OtherThing'`), others, 'the other type is untouched');
    const { rows } = await db.pool.query<{ id: string }>(
      `SELECT id::text AS id FROM ${s}.outbox_events WHERE type = 'BulkImported' AND last_error LIKE 'discarded by ferry console (token)%' ORDER BY seq`,
    );
    assert.deepEqual(
      rows.map((r) => r.id),
      bulk.slice(1),
    );
    await page.goto(`${consoleServer.url}/audit`);
    const audit = (await page.textContent('table.audit')) ?? '';
    assert.match(audit, /dlq\.discard.*"type":"BulkImported".*4ok/s);
    assert.match(audit, /the preview selected 5 failed row\(s\)/);
    assert.match(audit, /cli/);
    assert.deepEqual(problems, []);
    await page.close();
  });

  test('console - the blocked keys page groups failed heads by reason, and a group is discarded in one previewed action', async () => {
    const a = await publish(Array.from({ length: 3 }, (_, i) => ({ subject: `${unrouted}.groupa`, key: `ga${i}`, type: 'Grouped' })));
    const b = await publish(Array.from({ length: 2 }, (_, i) => ({ subject: `${unrouted}.groupb`, key: `gb${i}`, type: 'Grouped' })));
    await waitFor(async () => (await deadIds(`type = 'Grouped'`)).length === 5, {
      what: 'the 5 grouped events to go dead',
      timeoutMs: 20_000,
    });

    const { page, problems } = await watchedPage();
    await page.goto(`${consoleServer.url}/blocked`);
    const groupA = page.locator('table.groups tr[data-reason*="groupa"]');
    const groupB = page.locator('table.groups tr[data-reason*="groupb"]');
    assert.equal(await groupA.locator('td.keys').textContent(), '3');
    assert.equal(await groupB.locator('td.keys').textContent(), '2');
    await groupA.locator('button[data-action=discard]').click();
    await page.waitForURL('**/dlq/preview');
    assert.equal(await page.textContent('#count'), '3');
    await page.click('#confirm');
    await page.waitForURL('**/dlq/apply');
    assert.equal(await page.textContent('#done'), '3');
    assert.deepEqual(await deadIds(`type = 'Grouped'`), b, 'only the other reason stays dead');
    const { rows } = await db.pool.query<{ id: string }>(
      `SELECT id::text AS id FROM ${s}.outbox_events WHERE type = 'Grouped' AND last_error LIKE 'discarded by ferry console%' ORDER BY seq`,
    );
    assert.deepEqual(
      rows.map((r) => r.id),
      a,
    );
    // The rest are settled so later tests count only their own dead rows.
    await markPublished(db.pool, db.schema, `o.type = 'Grouped'`);
    assert.deepEqual(problems, []);
    await page.close();
  });

  test("console - a replay by key from the events page previews the count, sends the key's copies in version order, and is audited", async () => {
    const ids = await publish(
      Array.from({ length: 3 }, (_, i) => ({ subject: `${stream.prefix}.replay`, key: 'replay-me', type: 'Replayed', data: { i } })),
    );
    await publish([{ subject: `${stream.prefix}.replay`, key: 'not-me', type: 'Replayed' }]);
    const sent = async (key: string) => (await readStream(stream.nc, stream.name)).filter((e) => e.key === key);
    await waitFor(async () => (await sent('replay-me')).length === 3 && (await sent('not-me')).length === 1, {
      what: 'the four events published',
      timeoutMs: 20_000,
    });

    const { page, problems } = await watchedPage();
    await page.goto(`${consoleServer.url}/events?key=replay-me`);
    await page.click('button:has-text("Replay all matching published")');
    await page.waitForURL('**/replay/preview');
    assert.equal(await page.textContent('#count'), '3');
    assert.match((await page.textContent('#summary')) ?? '', /replays 3 published event\(s\) \(seq \d+\.\.\d+\) to every consumer/);
    await page.click('#confirm');
    await page.waitForURL('**/replay/apply');
    assert.equal(await page.textContent('#done'), '3');

    const copies = await sent('replay-me');
    assert.deepEqual(
      copies.map((e) => [e.id, e.version]),
      [...ids, ...ids].map((id, i) => [id, BigInt((i % 3) + 1)]),
      'the originals, then one copy of each in version order',
    );
    assert.equal((await sent('not-me')).length, 1, 'another key is not replayed');
    const { rows } = await db.pool.query<{ action: string; rows: number; outcome: string; filter: { key?: string } }>(
      `SELECT action, rows, outcome, filter FROM ${s}.operator_actions WHERE action = 'replay' ORDER BY id`,
    );
    assert.equal(rows.length, 2, 'a row before the first copy, and one when the run ended');
    assert.match(rows[0]?.outcome ?? '', /^started: 3 copies to send/);
    assert.equal(rows[1]?.rows, 3);
    assert.equal(rows[1]?.outcome, 'ok');
    assert.equal(rows[1]?.filter.key, 'replay-me');

    // The overview's charts count what the relay published this hour (a replay is not a publish).
    const { rows: published } = await db.pool.query<{ n: string }>(
      `SELECT count(*)::text AS n FROM ${s}.outbox_events WHERE published_at > now() - interval '59 minutes' AND dead_at IS NULL`,
    );
    await page.goto(`${consoleServer.url}/`);
    await showsText(page, '#chart-total', (t) => t === published[0]?.n, `the chart to count the ${published[0]?.n} events published`);
    assert.equal(await page.locator('svg[data-chart=published] g').count(), 60);
    assert.ok((await page.locator('svg[data-chart=latency] rect.p99').count()) > 0, 'a latency bar');
    assert.deepEqual(problems, []);
    await page.close();
  });

  test('console - while the first numbers cannot be read (a statement that does not return), the overview answers at once and fills in by itself', async () => {
    const fresh = await startConsole({
      pool: db.pool,
      schema: db.schema,
      bossSchema: `${db.schema}_boss`,
      host: '127.0.0.1',
      port: 0,
      readOnly: true,
      refreshMs: 5000,
    });
    const blocker = await db.pool.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query(`LOCK TABLE ${s}.outbox IN ACCESS EXCLUSIVE MODE`);
      const { page, problems } = await watchedPage();
      const started = performance.now();
      await page.goto(`${fresh.url}/`);
      const tookMs = performance.now() - started;
      assert.match((await page.textContent('#live')) ?? '', /Reading the numbers/);
      assert.ok(tookMs < 5000, `the page answered in ${Math.round(tookMs)} ms, not after the blocked read`);
      await blocker.query('ROLLBACK');
      await showsText(page, '[data-card=pending] b', (t) => /^\d+$/.test(t), 'the overview to fill in without a reload');
      assert.deepEqual(problems, []);
      await page.close();
    } finally {
      await blocker.query('ROLLBACK').catch(() => {});
      blocker.release();
      await fresh.close();
    }
  });

  test('console - the overview lists each running inbox with its consumer, release and last heartbeat, and a stale one as stale', async () => {
    // A heartbeat left by an inbox that was killed (it stopped renewing a minute ago; a clean stop deletes the row).
    await db.pool.query(
      `INSERT INTO ${s}.inbox_instances (instance, consumer, stream, mode, release, host, pid, seen_at, expires_at)
       VALUES ('deadbeef', 'shipping', 'ORDERS', 'sequential', '0.0.1', 'gone-host', 4242, now() - interval '1 minute', now() - interval '30 seconds')`,
    );
    try {
      const { page, problems } = await watchedPage();
      await page.goto(`${consoleServer.url}/`);
      const live = '#inbox-instances tr[data-inbox]:not([data-inbox=deadbeef])';
      await showsText(page, live, (t) => t.includes('billing'), 'the running inbox in the Inboxes table');
      const row = page.locator(live);
      assert.equal(await row.count(), 1, "one running inbox: the test's billing consumer");
      const cells = await row.locator('td').allTextContents();
      assert.match(cells[0] ?? '', /^[0-9a-f]{8}$/, 'its instance id');
      assert.equal(cells[1], 'billing');
      assert.equal(cells[2], FERRY_RELEASE);
      assert.equal(cells[3], `latest on ${inboxStream.name}`);
      assert.match(cells[5] ?? '', /^[\d.]+ (ms|s) ago$/, 'a recent heartbeat, not stale');
      await showsText(page, '#inbox-instances tr[data-inbox=deadbeef]', (t) => t.includes('stale'), 'the killed inbox shown stale');
      const stale = page.locator('#inbox-instances tr[data-inbox=deadbeef]');
      assert.equal(await stale.getAttribute('class'), 'bad');
      assert.match((await stale.textContent()) ?? '', /shipping.*0\.0\.1.*stale, stopped beating/);
      assert.deepEqual(problems, []);
      await page.close();
    } finally {
      await db.pool.query(`DELETE FROM ${s}.inbox_instances WHERE instance = 'deadbeef'`);
    }
  });

  test('console - a parked event retried in the console is applied by the inbox, once', async () => {
    await publishToStream(inboxStream.nc, [ferryEvent(inboxStream.prefix, { key: 'invoice-7', version: 1, type: 'Charge' })]);
    const jobTable = `${quoteIdentifier(`${db.schema}_boss`)}.job`;
    await waitFor(
      async () => {
        const r = await db.pool
          .query<{ n: number }>(`SELECT count(*)::int AS n FROM ${jobTable} WHERE name = 'ferry.inbox.billing.parked' AND state = 'failed'`)
          .catch(() => ({ rows: [{ n: 0 }] }));
        return r.rows[0]?.n === 1;
      },
      { what: 'the event parked and failed in the park', timeoutMs: 20_000 },
    );
    const { page, problems } = await watchedPage();
    await page.goto(`${consoleServer.url}/`);
    await showsText(
      page,
      '#live',
      (t) => t.includes('Consumer billing has 1 failed parked event'),
      'the overview to name the parked event',
    );
    await page.goto(`${consoleServer.url}/parked?consumer=billing`);
    const row = page.locator('table.parked tr[data-job]');
    assert.equal(await row.count(), 1);
    assert.match((await row.textContent()) ?? '', /invoice-7.*payment gateway down/s);
    failParked = false;
    await row.locator('button[data-action=retry]').click();
    await page.waitForURL('**/parked/preview');
    assert.equal(await page.textContent('#count'), '1');
    await page.click('#confirm');
    await page.waitForURL('**/parked/apply');
    assert.equal(await page.textContent('#done'), '1');
    await waitFor(() => applied.length > 0, { what: 'the inbox to apply the retried event', timeoutMs: 20_000 });
    // Give a second application every chance to show up: the park worker polls every 500 ms.
    await new Promise((r) => setTimeout(r, 1500));
    assert.deepEqual(applied, ['invoice-7/1'], 'applied once');
    await page.goto(`${consoleServer.url}/versions?key=invoice-7`);
    assert.match((await page.textContent('table.versions')) ?? '', /billing\s*invoice-7\s*1/);
    assert.deepEqual(problems, []);
    await page.close();
  });

  test('console - hostile keys, types, headers and payloads render as text and no script runs', async () => {
    const id = randomUUID();
    const key = '<script>window.__pwned=1</script>\u0007\u202e';
    const type = '"><img src=x onerror="window.__pwned=2">';
    const headers = { 'x-evil': '<img src=x onerror=window.__pwned=3>', '"><svg onload=window.__pwned=4>': 'v' };
    const data = Buffer.concat([Buffer.from('<script>window.__pwned=5</script>'), Buffer.from([0xff, 0xfe, 0x00, 0xc3])]);
    // Stored dead in one transaction: the running relay never sees it pending.
    await withTransaction(db.pool, async (tx) => {
      await tx.query(
        `INSERT INTO ${s}.outbox (id, key, version, subject, type, source, content_type, data, headers, occurred_at)
         VALUES ($1, $2, 1, $3, $4, 'hostile', 'application/json', $5, $6, now())`,
        [id, key, `${unrouted}.x`, type, data, JSON.stringify(headers)],
      );
      const failed = await setFailed(tx, db.schema, 'o.id = $1', [id], {
        attempts: 1,
        lastError: '<b onmouseover=window.__pwned=6>err</b>',
        dead: true,
      });
      assert.equal(failed, 1);
    });
    const { page, problems } = await watchedPage();
    // The event's own page last: its text is checked below.
    for (const path of ['/', '/blocked', '/audit', `/events?key=${encodeURIComponent(key)}`, `/event?id=${id}`]) {
      await page.goto(`${consoleServer.url}${path}`);
      assert.equal(await page.evaluate('typeof window.__pwned'), 'undefined', `no script ran on ${path}`);
      assert.equal(
        await page.locator('main img, main svg:not(.chart), main script, main b[onmouseover], main [onload], main [onerror]').count(),
        0,
        `no injected element on ${path}`,
      );
    }
    // On the event's page every hostile value is there, as text.
    const text = (await page.textContent('main')) ?? '';
    assert.ok(text.includes('<script>window.__pwned=1</script>\\u0007\\u202e'), 'the key as text, controls visible');
    assert.ok(text.includes(type), 'the type as text');
    assert.ok(text.includes(headers['x-evil']), 'a header as text');
    assert.ok(text.includes('"><svg onload=window.__pwned=4>'), 'a header name as text');
    assert.match((await page.textContent('pre.payload')) ?? '', /^00000000 {2}3c 73 63 72/, 'invalid UTF-8 shown as hex');
    assert.deepEqual(problems, []);
    // Settle it so later tests see one dead row less.
    assert.equal(await markPublished(db.pool, db.schema, 'o.id = $1', [id]), 1);
    await page.close();
  });

  test('console - without the token an action is refused (403), a cross-origin POST is refused, --read-only offers no actions and accepts none, ferry relay --console serves it too', async () => {
    const [dead] = await publish([{ subject: `${unrouted}.auth`, key: 'auth-key', type: 'AuthTest' }]);
    await waitFor(async () => (await deadIds()).includes(dead as string), { what: 'a dead row', timeoutMs: 20_000 });
    const form = (fields: Record<string, string>) => new URLSearchParams(fields).toString();
    const post = (base: string, path: string, body: string, headers: Record<string, string> = {}) =>
      fetch(`${base}${path}`, {
        method: 'POST',
        body,
        redirect: 'manual',
        headers: { 'content-type': 'application/x-www-form-urlencoded', origin: base, ...headers },
      });
    // A browser without the login sees no action, and a POST without credentials is refused.
    const session = await context.cookies();
    await context.clearCookies();
    const { page } = await watchedPage();
    // The blocked keys are read once per refresh interval for every viewer: reload until the new one shows.
    await waitFor(
      async () => {
        await page.goto(`${consoleServer.url}/blocked`);
        return (await page.locator('tr[data-key="auth-key"]').count()) === 1;
      },
      { what: 'the blocked page to list auth-key', timeoutMs: 15_000, intervalMs: 300 },
    );
    assert.equal(await page.locator('form[action^="/dlq"]').count(), 0, 'no action offered without the token');
    await page.close();
    await context.addCookies(session);
    const noToken = await post(
      consoleServer.url,
      '/dlq/apply',
      form({ action: 'discard', key: 'auth-key', expect_rows: '1', expect_max_seq: '' }),
    );
    assert.equal(noToken.status, 403);
    assert.match(await noToken.text(), /actions need the console token/);

    // With the token and a valid CSRF token, but from another origin: refused.
    const auth = { authorization: `Bearer ${TOKEN}` };
    const html = await (await fetch(`${consoleServer.url}/blocked`, { headers: auth })).text();
    const csrf = /name="csrf" value="([0-9a-f]{64})"/.exec(html)?.[1];
    assert.ok(csrf, 'the blocked page offers actions to the token holder');
    const body = form({ csrf, action: 'discard', key: 'auth-key', expect_rows: '1', expect_max_seq: '' });
    const crossOrigin = await post(consoleServer.url, '/dlq/apply', body, { ...auth, origin: 'http://evil.example' });
    assert.equal(crossOrigin.status, 403);
    assert.match(await crossOrigin.text(), /cross-origin request refused/);
    const crossSite = await post(consoleServer.url, '/dlq/apply', body, { ...auth, 'sec-fetch-site': 'cross-site' });
    assert.equal(crossSite.status, 403);
    const noCsrf = await post(consoleServer.url, '/dlq/apply', form({ action: 'discard', key: 'auth-key', expect_rows: '1' }), auth);
    assert.equal(noCsrf.status, 403);
    assert.deepEqual(await deadIds(`key = 'auth-key'`), [dead], 'nothing was discarded');
    const rebound = await new Promise<number>((resolve, reject) =>
      request(`${consoleServer.url}/`, { headers: { host: 'attacker.example' } }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      })
        .on('error', reject)
        .end(),
    );
    assert.equal(rebound, 421, 'a foreign Host (DNS rebinding) is refused on a loopback bind');

    // ferry console --read-only, started as an operator would, with the same token, as a role holding only
    // what ferry migrate --print-grants --for console prints (SELECT, nothing else).
    const role = `${db.schema}_ro`;
    await db.pool.query(`CREATE ROLE ${quoteIdentifier(role)} LOGIN`);
    await db.pool.query(grantsSql({ role, for: 'console', schema: db.schema }));
    const roleUrl = new URL(db.url);
    roleUrl.username = role;
    const child = spawn(
      process.execPath,
      [
        FERRY_BIN,
        'console',
        '--read-only',
        '--port',
        '0',
        '--database-url',
        roleUrl.toString(),
        '--schema',
        db.schema,
        '--nats-url',
        natsUrl(),
      ],
      { env: { ...process.env, FERRY_CONSOLE_TOKEN: TOKEN }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    try {
      let out = '';
      child.stdout.on('data', (c: Buffer) => {
        out += c.toString();
      });
      child.stderr.on('data', () => {});
      const url = await waitFor(() => /on (http:\/\/127\.0\.0\.1:\d+)/.exec(out)?.[1], {
        what: 'ferry console to listen',
        timeoutMs: 20_000,
      });
      assert.match(out, /\(read-only\)/);
      for (const path of [
        '/',
        '/events?state=dead',
        `/event?id=${dead}`,
        '/parked?consumer=billing',
        '/versions?key=invoice-7',
        '/audit',
      ]) {
        const res = await fetch(`${url}${path}`, { headers: auth });
        const text = await res.text();
        assert.equal(res.status, 200, `${path} as the SELECT-only role: ${text.slice(0, 400)}`);
        assert.doesNotMatch(text, /<form[^>]*method="post"/, `${path} offers no action`);
      }
      const ro = await (await fetch(`${url}/blocked`, { headers: auth })).text();
      assert.match(ro, /auth-key/);
      assert.doesNotMatch(ro, /<form[^>]*action="\/(dlq|parked)\//, 'no action offered');
      const roCsrf = /name="csrf" value="([0-9a-f]{64})"/.exec(ro)?.[1] ?? 'x';
      const refused = await post(url, '/dlq/apply', form({ csrf: roCsrf, action: 'discard', key: 'auth-key', expect_rows: '1' }), auth);
      assert.equal(refused.status, 403);
      assert.match(await refused.text(), /read-only/);
      const preview = await post(url, '/dlq/preview', form({ csrf: roCsrf, action: 'discard', key: 'auth-key' }), auth);
      assert.equal(preview.status, 403);
      assert.deepEqual(await deadIds(`key = 'auth-key'`), [dead], 'still dead');
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
      await db.pool.query(`DROP OWNED BY ${quoteIdentifier(role)}`).catch(() => {});
      await db.pool.query(`DROP ROLE IF EXISTS ${quoteIdentifier(role)}`).catch(() => {});
    }
    // ferry relay --console: the same console on the relay's HTTP port, beside /metrics.
    const port = await freePort();
    const relayChild = spawn(
      process.execPath,
      [
        FERRY_BIN,
        'relay',
        '--console',
        '--http-port',
        String(port),
        '--database-url',
        db.url,
        '--schema',
        db.schema,
        '--nats-url',
        natsUrl(),
      ],
      { env: { ...process.env, FERRY_CONSOLE_TOKEN: TOKEN, FERRY_LOG_LEVEL: 'warn' }, stdio: ['ignore', 'ignore', 'ignore'] },
    );
    try {
      const base = `http://127.0.0.1:${port}`;
      await waitFor(async () => (await fetch(`${base}/healthz`).catch(() => undefined))?.status === 200, {
        what: 'ferry relay --console to listen',
        timeoutMs: 20_000,
      });
      assert.equal((await fetch(`${base}/metrics`)).status, 200);
      const page = await fetch(`${base}/blocked`, { headers: auth });
      assert.equal(page.status, 200);
      const text = await page.text();
      assert.match(text, /auth-key/);
      assert.match(text, /action="\/dlq\/preview"/, 'actions offered to the token holder');
      const refused = await post(base, '/dlq/apply', form({ action: 'discard', key: 'auth-key', expect_rows: '1' }));
      assert.equal(refused.status, 403, 'no token, no action');
    } finally {
      relayChild.kill('SIGTERM');
      await new Promise((r) => relayChild.once('exit', r));
    }
    const open = await ferry(['console', '--host', '0.0.0.0', '--database-url', db.url, '--schema', db.schema], {});
    assert.equal(open.code, 2, 'another bind without credentials is refused');
    assert.match(open.err, /--host 0\.0\.0\.0 lets other hosts in: give a token/);
    const short = await ferry(['console', '--database-url', db.url], { FERRY_CONSOLE_TOKEN: 'short' });
    assert.equal(short.code, 2);
    assert.match(short.err, /FERRY_CONSOLE_TOKEN has 5 characters; give at least 16/);
  });
});
