import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { migrate, withTransaction } from '@ferry/core';
import { listParked } from '@ferry/inbox';
import { createPublisher } from '@ferry/publisher';
import { type ConsoleServer, startConsole } from '@ferry/relay';
import { waitFor } from '@ferry/testkit';
import { PgBoss } from 'pg-boss';
import type { BrowserContext, Page } from 'playwright-core';
import { type Browser, launchChromium, logIn } from './chromium.js';
import { markPublished } from './delivery-state.js';
import { EFFECT_SQL, ferryEvent, type InboxFixture, inboxFixture, publishEvents } from './inbox-support.js';

// Issue 43, item 1, in the console (real Chromium, real PostgreSQL and NATS): the parked page lists
// the keys that wait for a version nothing holds; "Skip missing versions…" previews and, confirmed,
// skips (audited), after which the key's parked versions apply in order, once; when the outbox
// still holds the missing version the preview offers its replay first; a discard that leaves its
// key waiting shows the key's skip on the result page.

const TOKEN = 'console-skip-token-0123456789';

let fx: InboxFixture;
let boss: PgBoss;
let consoleServer: ConsoleServer;
let context: BrowserContext;
let browser: Browser;
const calls = new Map<string, number>();

async function appliedInOrder(key: string): Promise<string[]> {
  const { rows } = await fx.db.pool.query<{ version: string }>(
    `SELECT e.version::text AS version FROM ${fx.s}.effects e WHERE e.key = $1 ORDER BY e.applied_at, e.version`,
    [key],
  );
  return rows.map((r) => r.version);
}

async function headFailed(key: string, parked: number): Promise<void> {
  await waitFor(
    async () => {
      const rows = (await listParked({ boss, consumer: 'billing' })).filter((r) => r.key === key);
      return rows.find((r) => r.version === '3')?.state === 'failed' && rows.length === parked;
    },
    { what: `${key}/3 failed in the parking lot`, timeoutMs: 60_000 },
  );
}

async function watchedPage(): Promise<{ page: Page; problems: string[] }> {
  const page = await context.newPage();
  const problems: string[] = [];
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) problems.push(`console: ${m.text()}`);
  });
  return { page, problems };
}

before(async () => {
  fx = await inboxFixture();
  await migrate({ pool: fx.db.pool, schema: fx.db.schema, set: 'outbox' });
  const inbox = fx.inbox({
    mode: 'sequential',
    gapTimeoutMs: 1_500,
    parkRetryLimit: 1,
    parkRetryDelayMs: 1_000,
    handlers: {
      Set: async (event, { tx }) => {
        const id = `${event.key}/${event.version}`;
        calls.set(id, (calls.get(id) ?? 0) + 1);
        await tx.query(EFFECT_SQL(fx.s).effect, [event.key, event.version.toString()]);
      },
    },
  });
  await inbox.start();
  boss = new PgBoss({ connectionString: fx.db.url, schema: fx.bossSchema, supervise: false, schedule: false, max: 2 });
  boss.on('error', () => {});
  await boss.start();
  const publisher = createPublisher({ schema: fx.db.schema, source: 'console-skip-test' });
  await withTransaction(fx.db.pool, (tx) =>
    publisher.publishMany(
      tx,
      [1, 2, 3].map(() => ({ subject: `${fx.stream.prefix}.set`, key: 'k-replay', type: 'Set', data: {} })),
    ),
  );
  await markPublished(fx.db.pool, fx.db.schema, 'o.key = $1', ['k-replay']);
  const p = fx.stream.prefix;
  await publishEvents(fx.stream.nc, [
    ...[1, 3, 4].map((version) => ferryEvent(p, { key: 'k-skip', version })),
    ...[1, 3].map((version) => ferryEvent(p, { key: 'k-replay', version })),
    ...[1, 3].map((version) => ferryEvent(p, { key: 'k-discard', version })),
  ]);
  await headFailed('k-skip', 2);
  await headFailed('k-replay', 1);
  await headFailed('k-discard', 1);
  consoleServer = await startConsole({
    pool: fx.db.pool,
    schema: fx.db.schema,
    bossSchema: fx.bossSchema,
    nc: fx.stream.nc,
    host: '127.0.0.1',
    port: 0,
    readOnly: false,
    token: TOKEN,
    refreshMs: 1000,
  });
  browser = await launchChromium();
  context = browser.context;
  await logIn(context, consoleServer.url, TOKEN);
});

after(async () => {
  await browser?.close();
  await consoleServer?.close();
  await boss?.stop({ graceful: false }).catch(() => {});
  await fx?.close();
});

describe('ferry console: skip missing versions, in Chromium', () => {
  test('console skip - the parked page names the stuck key; its previewed skip is applied and audited, then v3 and v4 apply once, in order', async () => {
    const { page, problems } = await watchedPage();
    await page.goto(`${consoleServer.url}/parked?consumer=billing`);
    assert.match((await page.textContent('#stuck')) ?? '', /3 key\(s\) of billing wait for a version/);
    const row = page.locator('table.stuck tr[data-stuck-key="k-skip"]');
    assert.match((await row.textContent()) ?? '', /billing\s*k-skip\s*1\s*2\s*2\.\.2\s*2\s*0/);
    await row.locator('button[data-action=skip]').click();
    await page.waitForURL('**/skip/preview');
    assert.match((await page.textContent('#state')) ?? '', /is at version 1 and waits for version 2, which nothing holds/);
    assert.equal(await page.textContent('#range'), '2..2');
    assert.equal(await page.locator('#replay-first').count(), 0, 'the outbox does not hold k-skip/2');
    assert.deepEqual(await appliedInOrder('k-skip'), ['1'], 'a preview changes nothing');
    // A second tab previews and confirms the same skip first.
    const other = await watchedPage();
    await other.page.goto(`${consoleServer.url}/parked?consumer=billing`);
    await other.page.locator('table.stuck tr[data-stuck-key="k-skip"] button[data-action=skip]').click();
    await other.page.waitForURL('**/skip/preview');
    await other.page.click('#confirm');
    await other.page.waitForURL('**/skip/apply');
    assert.equal(await other.page.textContent('#done'), '2..2');
    assert.deepEqual(other.problems, []);
    await other.page.close();
    // This tab's confirmation is of a key that has moved: nothing is done, and the new preview is shown (409).
    const [answer] = await Promise.all([page.waitForResponse('**/skip/apply'), page.click('#confirm')]);
    assert.equal(answer.status(), 409);
    assert.equal(await page.locator('#changed').count(), 1);
    assert.match((await page.textContent('#error')) ?? '', /nothing done: key "k-skip" of consumer billing is at version [2-4] now/);
    await waitFor(async () => ((await appliedInOrder('k-skip')).length === 3 ? true : undefined), {
      what: 'k-skip v3 and v4 applied after the skip',
      timeoutMs: 30_000,
    });
    assert.deepEqual(await appliedInOrder('k-skip'), ['1', '3', '4']);
    for (const v of [1, 3, 4]) assert.equal(calls.get(`k-skip/${v}`), 1);
    const { rows } = await fx.db.pool.query<{ via: string; filter: { key: string; through: string }; outcome: string }>(
      `SELECT via, filter, outcome FROM ${fx.s}.operator_actions WHERE action = 'inbox.skip' ORDER BY id`,
    );
    assert.deepEqual(
      rows.map((r) => [r.via, r.filter.key, r.filter.through, r.outcome.startsWith('nothing done') ? 'refused' : r.outcome]),
      [
        ['console', 'k-skip', '2', 'ok'],
        ['console', 'k-skip', '2', 'refused'],
      ],
    );
    assert.deepEqual(problems, []);
    await page.close();
  });

  test('console skip - when the outbox still holds the missing version the preview offers its replay first, and the replay moves the key on', async () => {
    const { page, problems } = await watchedPage();
    await page.goto(`${consoleServer.url}/parked?consumer=billing`);
    await page.locator('table.stuck tr[data-stuck-key="k-replay"] button[data-action=skip]').click();
    await page.waitForURL('**/skip/preview');
    assert.match((await page.textContent('#replay-first')) ?? '', /still holds 1 of these version\(s\) \(2\): replay first/);
    assert.match((await page.textContent('#confirm')) ?? '', /Skip them anyway/);
    await page.locator('button[data-action=replay]').click();
    await page.waitForURL('**/replay/preview');
    assert.equal(await page.textContent('#count'), '1');
    await page.click('#confirm');
    await page.waitForURL('**/replay/apply');
    assert.equal(await page.textContent('#done'), '1');
    await waitFor(async () => ((await appliedInOrder('k-replay')).length === 3 ? true : undefined), {
      what: 'the replayed k-replay/2, then v3',
      timeoutMs: 30_000,
    });
    assert.deepEqual(await appliedInOrder('k-replay'), ['1', '2', '3']);
    assert.deepEqual(problems, []);
    await page.close();
  });

  test('console skip - discarding the parked event of a key waiting below it shows the key skip on the result page, and the skip moves it on', async () => {
    const { page, problems } = await watchedPage();
    await page.goto(`${consoleServer.url}/parked?consumer=billing&key=k-discard`);
    await page.locator('table.parked tr[data-job] button[data-action=discard]').click();
    await page.waitForURL('**/parked/preview');
    await page.click('#confirm');
    await page.waitForURL('**/parked/apply');
    assert.equal(await page.textContent('#done'), '1');
    const stuckRow = /billing\s*k-discard\s*1\s*2\s*2\.\.2\s*0\s*0\s*3/;
    assert.match((await page.locator('table.stuck tr[data-stuck-key="k-discard"]').textContent()) ?? '', stuckRow);
    // With nothing parked left, the consumer has no parked count: the page without a consumer lists the key.
    await page.goto(`${consoleServer.url}/parked`);
    const row = page.locator('table.stuck tr[data-stuck-key="k-discard"]');
    assert.match((await row.textContent()) ?? '', stuckRow);
    await row.locator('button[data-action=skip]').click();
    await page.waitForURL('**/skip/preview');
    await page.click('#confirm');
    await page.waitForURL('**/skip/apply');
    assert.match((await page.textContent('#result')) ?? '', /it is at version 3 now/);
    await publishEvents(fx.stream.nc, [ferryEvent(fx.stream.prefix, { key: 'k-discard', version: 4 })]);
    await waitFor(async () => ((await appliedInOrder('k-discard')).includes('4') ? true : undefined), {
      what: 'k-discard/4 applied after the skip',
      timeoutMs: 30_000,
    });
    assert.deepEqual(await appliedInOrder('k-discard'), ['1', '4']);
    await page.goto(`${consoleServer.url}/parked?consumer=billing`);
    assert.equal(await page.locator('#stuck').count(), 0, 'no key waits any more');
    assert.deepEqual(problems, []);
    await page.close();
  });
});
