import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { quoteIdentifier, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { type ConsoleServer, startConsole } from '@ferry/relay';
import { createTestDatabase, type TestDatabase } from '@ferry/testkit';
import { consoleCall } from './console-call.js';
import { markPublished, setFailed } from './delivery-state.js';

// The console's dlq routes over plain HTTP (the Chromium test, console-browser.test.ts, covers the
// clicking): a head the relay is backing off from, not dead, can be previewed and discarded or retried.

const TOKEN = 'console-dlq-http-token-0123456789';
let db: TestDatabase;
let s: string;
let server: ConsoleServer;
/** Per key: its head's id. */
const heads = new Map<string, string>();

before(async () => {
  db = await createTestDatabase({ prefix: 'console_dlq_http', lanes: 2 });
  s = quoteIdentifier(db.schema);
  const publisher = createPublisher({ schema: db.schema, source: 'console-dlq-http' });
  for (const key of ['boff', 'boff2', 'dead1']) {
    const rows = await withTransaction(db.pool, (tx) =>
      publisher.publishMany(tx, [
        { subject: 'nowhere.x', key, type: 'Head', data: {} },
        { subject: 'bound.x', key, type: 'Later', data: {} },
      ]),
    );
    heads.set(key, rows[0]?.id as string);
  }
  const backingOff = await setFailed(db.pool, db.schema, 'o.id = ANY ($1::uuid[])', [[heads.get('boff'), heads.get('boff2')]], {
    attempts: 2,
    nextAttemptAt: `now() + interval '1 hour'`,
    lastError: 'no_responders: no stream binds subject nowhere.x',
  });
  assert.equal(backingOff, 2);
  assert.equal(
    await setFailed(db.pool, db.schema, 'o.id = $1', [heads.get('dead1')], { attempts: 25, dead: true, lastError: 'no_responders' }),
    1,
  );
  server = await startConsole({
    pool: db.pool,
    schema: db.schema,
    bossSchema: `${db.schema}_boss`,
    host: '127.0.0.1',
    port: 0,
    readOnly: false,
    token: TOKEN,
    refreshMs: 1000,
  });
});

after(async () => {
  await server?.close();
  await db?.close();
});

/** One request as the operator's browser sends it: the token, and the console's own origin. */
function call(method: 'GET' | 'POST', path: string, form?: Record<string, string>): Promise<{ status: number; body: string }> {
  return consoleCall(server.url, TOKEN, method, path, form);
}

const field = (html: string, name: string) => new RegExp(`name="${name}" value="([^"]*)"`).exec(html)?.[1];
const text = (html: string, id: string) => new RegExp(`id="${id}"[^>]*>([^<]*)<`).exec(html)?.[1];

async function state(key: string) {
  const { rows } = await db.pool.query<{ published: boolean; dead: boolean; attempts: number; due: boolean }>(
    // A published (or discarded) event has no next attempt (next_attempt_at is null): never due.
    `SELECT published_at IS NOT NULL AS published, dead_at IS NOT NULL AS dead, attempts, coalesce(next_attempt_at <= now(), false) AS due
       FROM ${s}.outbox_events WHERE id = $1`,
    [heads.get(key)],
  );
  return rows[0];
}

test('console - a backing-off head on the blocked page offers retry and discard; the preview says it is backing off, the apply discards it', async () => {
  const page = await call('GET', '/blocked');
  assert.equal(page.status, 200);
  const row = /<tr class="bad" data-key="boff">[\s\S]*?<\/tr>/.exec(page.body)?.[0] ?? '';
  assert.match(row, /backing off/);
  assert.match(row, /data-action="discard"/, 'a backing-off head can be discarded');
  assert.match(row, /data-action="retry"/);
  const csrf = field(page.body, 'csrf');
  assert.ok(csrf);

  const preview = await call('POST', '/dlq/preview', { csrf, action: 'discard', key: 'boff' });
  assert.equal(preview.status, 200, preview.body);
  assert.equal(text(preview.body, 'count'), '1');
  assert.equal(text(preview.body, 'behind'), '1');
  assert.match(preview.body, /This discards <b id="count">1<\/b> backing-off event\(s\) of key <b>boff<\/b>/);
  assert.match(preview.body, /may be on the wire right now/);
  const applied = await call('POST', '/dlq/apply', {
    csrf,
    action: 'discard',
    key: 'boff',
    expect_rows: field(preview.body, 'expect_rows') ?? '',
    expect_digest: field(preview.body, 'expect_digest') ?? '',
  });
  assert.equal(applied.status, 200, applied.body);
  assert.equal(text(applied.body, 'done'), '1');
  assert.deepEqual(await state('boff'), { published: true, dead: true, attempts: 2, due: false });
  const { rows } = await db.pool.query<{ via: string; action: string; filter: Record<string, unknown>; rows: number }>(
    `SELECT via, action, filter, rows FROM ${s}.operator_actions`,
  );
  const digest = field(preview.body, 'expect_digest');
  assert.match(digest ?? '', /^[0-9a-f]{64}$/);
  assert.deepEqual(rows, [
    {
      via: 'console',
      action: 'dlq.discard',
      filter: {
        key: 'boff',
        state: 'failed',
        previewed: 1,
        previewDigest: digest,
        changed: { rows: 1, digest, ids: [heads.get('boff')] },
      },
      rows: 1,
    },
  ]);
});

test('console - the events filter acts on its state: all failed, only dead, or only backing off', async () => {
  const any = await call('GET', '/events?subject=nowhere.x');
  assert.match(any.body, /Retry all matching failed…/);
  const backingOff = await call('GET', '/events?subject=nowhere.x&state=backing-off');
  assert.match(backingOff.body, /Retry all matching backing-off…/);
  const published = await call('GET', '/events?subject=nowhere.x&state=published');
  assert.doesNotMatch(published.body, /Retry all matching/, 'no action offered for rows a dlq action never changes');
  const csrf = field(any.body, 'csrf') ?? '';
  const event = await call('GET', `/event?id=${heads.get('boff2')}`);
  assert.match(event.body, /data-field="state">backing-off</);
  assert.match(event.body, /data-action="retry"/, "a backing-off event's page offers retry");

  const dead = await call('POST', '/dlq/preview', { csrf, action: 'retry', subject: 'nowhere.x', state: 'dead' });
  assert.equal(text(dead.body, 'count'), '1');
  assert.match(dead.body, /retries <b id="count">1<\/b> dead event\(s\)/);
  const all = await call('POST', '/dlq/preview', { csrf, action: 'retry', subject: 'nowhere.x' });
  assert.equal(text(all.body, 'count'), '2');
  assert.match(all.body, /failed event\(s\) \(1 dead, 1 backing off\)/);
  const backingOffOnly = await call('POST', '/dlq/preview', { csrf, action: 'retry', subject: 'nowhere.x', state: 'backing-off' });
  const applied = await call('POST', '/dlq/apply', {
    csrf,
    action: 'retry',
    subject: 'nowhere.x',
    state: 'backing-off',
    expect_rows: '1',
    expect_digest: field(backingOffOnly.body, 'expect_digest') ?? '',
  });
  assert.equal(applied.status, 200, applied.body);
  assert.equal(text(applied.body, 'done'), '1');
  assert.deepEqual(await state('boff2'), { published: false, dead: false, attempts: 0, due: true });
  assert.deepEqual(
    { ...(await state('dead1')), due: undefined },
    { published: false, dead: true, attempts: 25, due: undefined },
    'the dead one was not selected',
  );
});

test('console - a confirmation whose selection changed since the preview (A published, C failed) changes nothing and shows the new preview', async () => {
  // Rows A, C, B of one subject prefix, in seq order, each its key's head; A and B are backing off, C is pending.
  const publisher = createPublisher({ schema: db.schema, source: 'console-dlq-http' });
  const acb = new Map<string, string>();
  for (const name of ['A', 'C', 'B']) {
    const [row] = await withTransaction(db.pool, (tx) =>
      publisher.publishMany(tx, [{ subject: `acb.${name}`, key: `acb-${name}`, type: 'Head', data: {} }]),
    );
    acb.set(name, row?.id as string);
  }
  const id = (name: string) => acb.get(name) as string;
  const failedNow = (names: string[]) =>
    setFailed(db.pool, db.schema, 'o.id = ANY ($1::uuid[])', [names.map(id)], {
      attempts: 2,
      nextAttemptAt: `now() + interval '1 hour'`,
      lastError: 'no_responders: no stream binds subject acb.x',
    });
  assert.equal(await failedNow(['A', 'B']), 2);
  const csrf = field((await call('GET', '/blocked')).body, 'csrf') ?? '';
  const preview = await call('POST', '/dlq/preview', { csrf, action: 'discard', subject: 'acb.' });
  assert.equal(preview.status, 200, preview.body);
  assert.equal(text(preview.body, 'count'), '2');
  assert.deepEqual(shownIds(preview.body), [id('A'), id('B')]);
  assert.match(preview.body, /Only these 2 rows change: if the selection differs when you confirm, nothing is done/);

  // Before the operator confirms: A is published, C fails. Still two failed rows, but C was never shown.
  assert.equal(await markPublished(db.pool, db.schema, 'o.id = $1', [id('A')]), 1);
  assert.equal(await failedNow(['C']), 1);
  const confirm = {
    csrf,
    action: 'discard',
    subject: 'acb.',
    expect_rows: field(preview.body, 'expect_rows') ?? '',
    expect_digest: field(preview.body, 'expect_digest') ?? '',
  };
  const refused = await call('POST', '/dlq/apply', confirm);
  assert.equal(refused.status, 409, refused.body);
  assert.match(
    text(refused.body, 'error') ?? '',
    /nothing done: the selection changed since the preview: 2 failed row\(s\) match again, but not the same ones/,
  );
  assert.match(refused.body, /The selection changed since your preview: nothing was done/);
  assert.deepEqual(shownIds(refused.body), [id('C'), id('B')], 'the answer is the new preview: C and B');
  assert.equal(text(refused.body, 'count'), '2');
  const acbState = async () => {
    const { rows } = await db.pool.query<{ id: string; state: string }>(
      `SELECT id::text AS id, CASE WHEN published_at IS NULL THEN 'pending' WHEN dead_at IS NULL THEN 'published' ELSE 'discarded' END AS state
         FROM ${s}.outbox_events WHERE subject LIKE 'acb.%' ORDER BY seq`,
    );
    return rows.map((r) => `${r.id === id('A') ? 'A' : r.id === id('C') ? 'C' : 'B'}:${r.state}`);
  };
  assert.deepEqual(await acbState(), ['A:published', 'C:pending', 'B:pending'], 'nothing was discarded');

  // The new preview's confirmation discards exactly C and B, and the audit row names them.
  const applied = await call('POST', '/dlq/apply', {
    ...confirm,
    expect_rows: field(refused.body, 'expect_rows') ?? '',
    expect_digest: field(refused.body, 'expect_digest') ?? '',
  });
  assert.equal(applied.status, 200, applied.body);
  assert.equal(text(applied.body, 'done'), '2');
  assert.deepEqual(await acbState(), ['A:published', 'C:discarded', 'B:discarded']);
  const { rows } = await db.pool.query<{
    filter: { subject?: string; changed?: { rows: number; digest: string; ids: string[] } };
    rows: number;
    outcome: string;
  }>(`SELECT filter, rows, outcome FROM ${s}.operator_actions WHERE filter->>'subject' = 'acb.' ORDER BY id`);
  assert.deepEqual(
    rows.map((r) => [r.rows, r.filter.changed?.ids, r.outcome.replace(/:.*/, '')]),
    [
      [0, [], 'nothing done'],
      [2, [id('C'), id('B')], 'ok'],
    ],
  );
  assert.equal(rows[1]?.filter.changed?.digest, field(refused.body, 'expect_digest'), 'the digest of what changed is the one confirmed');
});

/** The event ids a preview's table shows, in order. */
function shownIds(html: string): string[] {
  return [...html.matchAll(/href="\/event\?id=([0-9a-f-]{36})"/g)].map((m) => m[1] as string);
}
