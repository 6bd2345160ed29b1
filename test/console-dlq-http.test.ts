import assert from 'node:assert/strict';
import { request } from 'node:http';
import { after, before, test } from 'node:test';
import { quoteIdentifier, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { type ConsoleServer, startConsole } from '@ferry/relay';
import { createTestDatabase, type TestDatabase } from '@ferry/testkit';
import { setFailed } from './delivery-state.js';

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
  const url = new URL(path, server.url);
  const body = form ? new URLSearchParams(form).toString() : undefined;
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method,
        headers: {
          authorization: `Bearer ${TOKEN}`,
          origin: new URL(server.url).origin,
          ...(body ? { 'content-type': 'application/x-www-form-urlencoded', 'content-length': Buffer.byteLength(body) } : {}),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
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
    expect_max_seq: field(preview.body, 'expect_max_seq') ?? '',
  });
  assert.equal(applied.status, 200, applied.body);
  assert.equal(text(applied.body, 'done'), '1');
  assert.deepEqual(await state('boff'), { published: true, dead: true, attempts: 2, due: false });
  const { rows } = await db.pool.query<{ via: string; action: string; filter: Record<string, unknown>; rows: number }>(
    `SELECT via, action, filter, rows FROM ${s}.operator_actions`,
  );
  assert.equal(rows.length, 1);
  assert.match(String(rows[0]?.filter.maxSeq), /^\d+$/);
  delete rows[0]?.filter.maxSeq;
  assert.deepEqual(rows, [{ via: 'console', action: 'dlq.discard', filter: { key: 'boff', state: 'failed', previewed: 1 }, rows: 1 }]);
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
  const applied = await call('POST', '/dlq/apply', {
    csrf,
    action: 'retry',
    subject: 'nowhere.x',
    state: 'backing-off',
    expect_rows: '1',
    expect_max_seq: '',
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
