import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { isValidationError, quoteIdentifier, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { type ConsoleServer, startConsole } from '@ferry/relay';
import { createTestDatabase, type TestDatabase } from '@ferry/testkit';
import { chromium } from 'playwright-core';
import { consoleCall } from './console-call.js';
import { setFailed } from './delivery-state.js';

// Control characters in stored strings (issue 42, item 6): a key, type, subject or failure reason
// holding a C1 control, CR, LF, U+2028 or a bidi override is shown as a visible escape in text, and
// kept exactly in attributes, so the console's own forms post the exact value and the action finds
// its row. A lone surrogate cannot be stored at all: publish refuses it.

const CHROMIUM = process.env.FERRY_CHROMIUM ?? '/usr/bin/chromium';
const TOKEN = 'console-controls-token-0123456789';

let db: TestDatabase;
let s: string;
let server: ConsoleServer;
let unrouted: string;

/** Dead heads by key, each with its type, subject and reason. */
interface Hostile {
  key: string;
  type: string;
  subject: string;
  reason: string;
  id?: string;
}
const rows: Hostile[] = [];

before(async () => {
  db = await createTestDatabase({ prefix: 'console_controls', lanes: 1 });
  s = quoteIdentifier(db.schema);
  unrouted = `nostream_${db.schema}`;
  const tail = ['\u0085', '\u0080\u009f', '\u2028', '\u202e', '\u2066'];
  for (const [i, c] of tail.entries()) {
    rows.push(
      // A subject refuses what JavaScript's \s matches (U+2028 among them).
      {
        key: `victim${c}key`,
        type: `Order${c}Placed`,
        subject: `${unrouted}.sub${/\s/.test(c) ? '' : c}ject${i}`,
        reason: `gateway${c}refused ${i}`,
      },
      // Through the browser, only a reason can carry CR or LF: keys, types and subjects refuse C0.
      { key: `reason-cr-${i}`, type: 'T', subject: `${unrouted}.cr`, reason: `first line\rsecond ${c} ${i}` },
    );
  }
  rows.push(
    { key: 'reason-lf', type: 'T', subject: `${unrouted}.lf`, reason: 'first line\nsecond' },
    { key: 'reason-crlf', type: 'T', subject: `${unrouted}.crlf`, reason: 'first line\r\nsecond' },
    // Differs from reason-lf only in its newline: a form that loses CR would select both (or neither).
    { key: 'reason-lfcr', type: 'T', subject: `${unrouted}.lfcr`, reason: 'first line\n\rsecond' },
  );
  const publisher = createPublisher({ schema: db.schema, source: 'console-controls' });
  const published = await withTransaction(db.pool, (tx) =>
    publisher.publishMany(
      tx,
      rows.map((r) => ({ key: r.key, type: r.type, subject: r.subject, data: {} })),
    ),
  );
  for (const [i, r] of rows.entries()) {
    r.id = published[i]?.id;
    assert.equal(await setFailed(db.pool, db.schema, 'o.id = $1', [r.id], { attempts: 3, dead: true, lastError: r.reason }), 1);
  }
  server = await startConsole({
    pool: db.pool,
    schema: db.schema,
    bossSchema: `${db.schema}_boss`,
    host: '127.0.0.1',
    port: 0,
    readOnly: false,
    token: TOKEN,
    refreshMs: 100,
    pace: 1,
  });
});

after(async () => {
  await server?.close();
  await db?.close();
});

function call(method: 'GET' | 'POST', path: string, body?: string): Promise<{ status: number; body: string }> {
  return consoleCall(server.url, TOKEN, method, path, body);
}

/** What an HTML parser makes of a double-quoted attribute value (the entities the console writes). */
function attr(raw: string): string {
  return raw
    .replace(/\r\n?/g, '\n')
    .replace(/&(amp|lt|gt|quot);|&#(\d+);/g, (_, name: string | undefined, n: string | undefined) =>
      name ? (({ amp: '&', lt: '<', gt: '>', quot: '"' } as Record<string, string>)[name] ?? '') : String.fromCodePoint(Number(n)),
    );
}

/** No markup inside any attribute value: the first `<` after an opening quote would be one. */
function assertNoMarkupInAttributes(page: string, where: string): void {
  const bad = /\s[a-z-]+="[^"]*</.exec(page);
  assert.equal(bad, null, `${where}: markup inside an attribute: ${bad?.[0].slice(-120)}`);
}

/**
 * The form (of the chunk of page given) whose submit button says `action`, posted as a browser posts
 * it: every field's parsed value, CR and LF normalized to CRLF (HTML's form submission), urlencoded.
 */
function submit(chunk: string, action: string): { path: string; body: string } {
  const forms = chunk.match(/<form[\s\S]*?<\/form>/g) ?? [];
  const form = forms.find((f) => f.includes(`data-action="${action}"`) || f.includes('id="confirm"'));
  assert.ok(form, `a ${action} form in ${chunk.slice(0, 300)}`);
  const path = /action="([^"]*)"/.exec(form)?.[1] ?? '';
  const fields = [...form.matchAll(/<input type="hidden" name="([^"]*)" value="([^"]*)">/g)].map(([, n, v]): [string, string] => [
    attr(n ?? ''),
    attr(v ?? '').replace(/\r\n|\r|\n/g, '\r\n'),
  ]);
  return { path, body: new URLSearchParams(fields).toString() };
}

async function deadAndDiscarded(id: string | undefined): Promise<{ discarded: boolean }> {
  const { rows: r } = await db.pool.query<{ discarded: boolean }>(
    `SELECT (published_at IS NOT NULL AND dead_at IS NOT NULL) AS discarded FROM ${s}.outbox_events WHERE id = $1`,
    [id],
  );
  return r[0] as { discarded: boolean };
}

/** The blocked page's row (or group row) whose `attribute` holds exactly `value`. */
async function blockedRow(attribute: 'data-key' | 'data-reason', value: string): Promise<string> {
  const page = await call('GET', '/blocked');
  assert.equal(page.status, 200, page.body.slice(0, 300));
  assertNoMarkupInAttributes(page.body, '/blocked');
  const found = [...page.body.matchAll(new RegExp(`<tr class="bad" ${attribute}="([^"]*)">([\\s\\S]*?)</tr>`, 'g'))].find(
    ([, raw]) => attr(raw ?? '') === value,
  );
  assert.ok(found, `/blocked has a row whose ${attribute} is exactly ${JSON.stringify(value)}`);
  return found[2] ?? '';
}

/** Discards through the console's own forms: the row's button, the preview's confirmation. Returns the preview's count. */
async function discardThroughForms(chunk: string): Promise<string | undefined> {
  const first = submit(chunk, 'discard');
  const preview = await call('POST', first.path, first.body);
  assert.equal(preview.status, 200, preview.body.slice(0, 500));
  assertNoMarkupInAttributes(preview.body, 'the preview');
  const count = /id="count">(\d+)</.exec(preview.body)?.[1];
  assert.ok(count, `the preview finds the row: ${/<main>[\s\S]*?<\/p>/.exec(preview.body)?.[0]}`);
  const confirm = submit(preview.body, 'confirm');
  const done = await call('POST', confirm.path, confirm.body);
  assert.equal(done.status, 200, done.body.slice(0, 500));
  assert.equal(/id="done">(\d+)</.exec(done.body)?.[1], count);
  return count;
}

test('console - a key with a C1 control, U+2028 or a bidi override is discarded by the blocked page own form', async () => {
  const picked = rows.filter((x) => ['victim\u0085key', 'victim\u2028key', 'victim\u202ekey'].includes(x.key));
  assert.equal(picked.length, 3);
  for (const r of picked) {
    const row = await blockedRow('data-key', r.key);
    assert.ok(row.includes(`<span class="ctl">`), 'the text shows the control as a visible escape');
    assert.equal(await discardThroughForms(row), '1', JSON.stringify(r.key));
    assert.deepEqual(await deadAndDiscarded(r.id), { discarded: true }, JSON.stringify(r.key));
  }
});

test('console - a failure reason with CR, LF or CRLF is acted on by its group form, exactly (not its newline look-alikes)', async () => {
  for (const key of ['reason-cr-0', 'reason-lf', 'reason-lfcr']) {
    const r = rows.find((x) => x.key === key) as Hostile;
    const group = await blockedRow('data-reason', r.reason);
    assert.match(group, /name="reason:json"/, 'the reason travels as JSON: a browser would post its CR as CRLF');
    assert.equal(await discardThroughForms(group), '1', `only ${JSON.stringify(r.reason)}, not another newline spelling`);
    assert.deepEqual(await deadAndDiscarded(r.id), { discarded: true });
  }
  const crlf = rows.find((x) => x.key === 'reason-crlf') as Hostile;
  assert.deepEqual(await deadAndDiscarded(crlf.id), { discarded: false }, 'the CRLF reason is another group');
});

test('console - the events filter keeps a C1 key in its input and its bulk form, and the bulk form finds the row', async () => {
  const r = rows.find((x) => x.key === 'victim\u0080\u009fkey') as Hostile;
  const page = await call('GET', `/events?key=${encodeURIComponent(r.key)}&state=dead`);
  assert.equal(page.status, 200);
  assertNoMarkupInAttributes(page.body, '/events');
  assert.equal(attr(/<input name="key" value="([^"]*)"/.exec(page.body)?.[1] ?? ''), r.key, 'the filter input keeps the key exactly');
  assert.ok(page.body.includes(`<td>Order<span class="ctl">\\u0080</span><span class="ctl">\\u009f</span>Placed</td>`), 'the type as text');
  const bulk = /<p>Every dead event matching this filter:[\s\S]*?<\/p>/.exec(page.body)?.[0] ?? '';
  assert.equal(await discardThroughForms(bulk), '1');
  assert.deepEqual(await deadAndDiscarded(r.id), { discarded: true });
  const event = await call('GET', `/event?id=${r.id}`);
  assertNoMarkupInAttributes(event.body, '/event');
});

test('console - a lone surrogate is refused at publish (it cannot be stored), and a reason that had one shows U+FFFD', async () => {
  const publisher = createPublisher({ schema: db.schema, source: 'console-controls' });
  const base = { key: 'lone-ok', type: 'T', subject: `${unrouted}.lone`, data: {} };
  for (const [field, event] of [
    ['key', { ...base, key: 'lone\ud800key' }],
    ['type', { ...base, type: 'Lone\udc00Type' }],
    ['subject', { ...base, subject: `${unrouted}.lone\ud800` }],
    ['headers', { ...base, headers: { 'x-trace': 'a\udfffb' } }],
  ] as const) {
    await assert.rejects(
      withTransaction(db.pool, (tx) => publisher.publish(tx, event)),
      (e) => isValidationError(e) && /lone UTF-16 surrogate/.test((e as Error).message),
      field,
    );
  }
  // A reason is the relay's text, not a publisher's: the driver writes U+FFFD for a lone surrogate.
  const [id] = await withTransaction(db.pool, async (tx) => (await publisher.publishMany(tx, [base])).map((x) => x.id));
  await setFailed(db.pool, db.schema, 'o.id = $1', [id], { attempts: 1, dead: true, lastError: 'broken \ud800 reason' });
  const { rows: stored } = await db.pool.query<{ last_error: string }>(`SELECT last_error FROM ${s}.outbox_events WHERE id = $1`, [id]);
  assert.equal(stored[0]?.last_error, 'broken \ufffd reason');
  await blockedRow('data-key', 'lone-ok');
});

test('console in Chromium - discard by clicking: a C1 key and a CR reason reach their rows', async () => {
  const userDataDir = mkdtempSync(join(tmpdir(), 'ferry-console-controls-chromium-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run'],
  });
  try {
    const page = await context.newPage();
    await page.goto(`${server.url}/login`);
    await page.fill('input[name=token]', TOKEN);
    await Promise.all([page.waitForURL(`${server.url}/`), page.click('button[type=submit]')]);
    const click = async (selector: string, attribute: string, value: string) => {
      await page.goto(`${server.url}/blocked`);
      const candidates = page.locator(selector);
      const n = await candidates.count();
      for (let i = 0; i < n; i++) {
        const row = candidates.nth(i);
        if ((await row.getAttribute(attribute)) !== value) continue;
        await Promise.all([page.waitForURL('**/dlq/preview'), row.locator('button[data-action=discard]').click()]);
        const count = await page.textContent('#count').catch(() => null);
        assert.equal(count, '1', `the preview of ${JSON.stringify(value)}: ${await page.textContent('main')}`);
        await Promise.all([page.waitForURL('**/dlq/apply'), page.click('#confirm')]);
        assert.equal(await page.textContent('#done'), '1');
        return;
      }
      assert.fail(`no ${selector} with ${attribute} exactly ${JSON.stringify(value)}`);
    };
    const key = rows.find((x) => x.key === 'victim\u2066key') as Hostile;
    await click('table.blocked tr[data-key]', 'data-key', key.key);
    assert.deepEqual(await deadAndDiscarded(key.id), { discarded: true });
    const reason = rows.find((x) => x.key === 'reason-cr-1') as Hostile;
    await click('table.groups tr[data-reason]', 'data-reason', reason.reason);
    assert.deepEqual(await deadAndDiscarded(reason.id), { discarded: true });
    await page.close();
  } finally {
    await context.close();
    rmSync(userDataDir, { recursive: true, force: true });
  }
});
