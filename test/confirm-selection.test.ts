import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, test } from 'node:test';
import { bossSchemaFor, quoteIdentifier, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { type ConsoleServer, startConsole } from '@ferry/relay';
import { createTestDatabase, createTestStream, natsUrl, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import { jetstreamManager } from '@nats-io/jetstream';
import { PgBoss } from 'pg-boss';
import { consoleCall } from './console-call.js';
import { markPublished, setFailed } from './delivery-state.js';
import { ferry } from './ops-helpers.js';
import { FERRY_BIN } from './relay-helpers.js';

// Issue 42, item 3: a confirmation acts on exactly the rows its preview showed, or on none. Rows A,
// C, B in seq order; A and B back off; the operator is shown A and B; before the confirmation A is
// published and C fails. The CLI's confirmed paths must then change nothing (the console's dlq
// one is in console-dlq-http.test.ts); the parked actions, console and CLI, keep the same rule.
// One file for the one rule over every confirmed action (so over 350 lines): each test sets up its own rows.

const TOKEN = 'confirm-selection-token-0123456789';
const QUEUE = 'ferry.inbox.billing.parked';
let db: TestDatabase;
let s: string;
let boss: PgBoss;
let server: ConsoleServer;
let stream: TestStream;
const base = () => ['--database-url', db.url, '--schema', db.schema];

before(async () => {
  db = await createTestDatabase({ prefix: 'confirm_selection', lanes: 2, migrate: ['outbox', 'inbox'] });
  s = quoteIdentifier(db.schema);
  boss = new PgBoss({ connectionString: db.url, schema: bossSchemaFor(db.schema), max: 2, supervise: false, schedule: false });
  boss.on('error', () => {});
  await boss.start();
  await boss.createQueue(QUEUE, { policy: 'key_strict_fifo', retryLimit: 0 });
  stream = await createTestStream({ prefix: 'CONFSEL' });
  server = await startConsole({
    nc: stream.nc,
    pool: db.pool,
    schema: db.schema,
    bossSchema: bossSchemaFor(db.schema),
    oldBossSchema: false,
    host: '127.0.0.1',
    port: 0,
    readOnly: false,
    token: TOKEN,
    refreshMs: 1000,
  });
});

after(async () => {
  await server?.close();
  await stream?.close();
  await boss?.stop({ graceful: false, close: true }).catch(() => {});
  await db?.pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(bossSchemaFor(db.schema))} CASCADE`).catch(() => {});
  await db?.close();
});

/** Rows A, C, B of subject prefix `prefix.`, each its key's head, in seq order; A and B backing off. */
async function acb(prefix: string): Promise<{ id: (name: 'A' | 'B' | 'C') => string; fail: (name: 'A' | 'B' | 'C') => Promise<void> }> {
  const publisher = createPublisher({ schema: db.schema, source: 'confirm-selection' });
  const ids = new Map<string, string>();
  for (const name of ['A', 'C', 'B']) {
    const [row] = await withTransaction(db.pool, (tx) =>
      publisher.publishMany(tx, [{ subject: `${prefix}.${name}`, key: `${prefix}-${name}`, type: 'Head', data: {} }]),
    );
    ids.set(name, row?.id as string);
  }
  const id = (name: string) => ids.get(name) as string;
  const fail = async (name: string) => {
    const n = await setFailed(db.pool, db.schema, 'o.id = $1', [id(name)], {
      attempts: 2,
      nextAttemptAt: `now() + interval '1 hour'`,
      lastError: 'no_responders',
    });
    assert.equal(n, 1);
  };
  await fail('A');
  await fail('B');
  return { id, fail };
}

/** Each row of the prefix, in seq order, as `NAME:state`. */
async function states(prefix: string, id: (name: 'A' | 'B' | 'C') => string): Promise<string[]> {
  const { rows } = await db.pool.query<{ id: string; state: string }>(
    `SELECT id::text AS id, CASE WHEN published_at IS NULL THEN 'pending' WHEN dead_at IS NULL THEN 'published' ELSE 'discarded' END AS state
       FROM ${s}.outbox_events WHERE starts_with(subject, $1) ORDER BY seq`,
    [`${prefix}.`],
  );
  const name = (x: string) => (['A', 'B', 'C'] as const).find((n) => id(n) === x) ?? x;
  return rows.map((r) => `${name(r.id)}:${r.state}`);
}

test('ferry dlq discard - a terminal confirmation acts on the selection it asked about, or on nothing', async () => {
  const { id, fail } = await acb('tty');
  // A real terminal (script(1) gives the command a pty): the command asks, the rows change, the operator says yes.
  const command = [process.execPath, FERRY_BIN, 'dlq', 'discard', '--all-failed', ...base()].map((a) => `'${a}'`).join(' ');
  const child = spawn('script', ['-qfec', command, '/dev/null'], { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (c: Buffer) => {
    out += c.toString('utf8');
  });
  const exited = new Promise<number>((resolve) => child.on('close', (code) => resolve(code ?? -1)));
  try {
    await waitFor(() => /\[y\/N\]/.test(out), { what: 'the confirmation question', timeoutMs: 30_000 });
    assert.match(out, /discard 2 failed events of every key \(2 keys, backing off/);
    // Before the operator answers: A is published, C fails. Still two failed rows, not the two asked about.
    assert.equal(await markPublished(db.pool, db.schema, 'o.id = $1', [id('A')]), 1);
    await fail('C');
    child.stdin.write('y\n');
    assert.equal(await exited, 1, out);
  } finally {
    child.kill();
  }
  assert.match(out, /nothing done: the selection changed since the preview: 2 failed row\(s\) match again, but not the same ones/);
  assert.deepEqual(await states('tty', id), ['A:published', 'C:pending', 'B:pending'], 'nothing was discarded');
});

test('ferry dlq discard - --expect-selection holds a scripted confirmation to what --dry-run showed; the audit row names the ids', async () => {
  const { id, fail } = await acb('dry');
  const dry = await ferry(['dlq', 'discard', '--all-failed', '--dry-run', '--json', ...base()]);
  assert.equal(dry.code, 0, dry.err);
  const shown = dry.json<{ wouldChange: string[]; selection: { rows: number; digest: string } }>();
  const failedNow = shown.wouldChange.filter((x) => x === id('A') || x === id('B'));
  assert.deepEqual(failedNow, [id('A'), id('B')]);
  assert.match(shown.selection.digest, /^[0-9a-f]{64}$/);

  assert.equal(await markPublished(db.pool, db.schema, 'o.id = $1', [id('A')]), 1);
  await fail('C');
  const refused = await ferry(['dlq', 'discard', '--all-failed', '--yes', '--expect-selection', shown.selection.digest, ...base()]);
  assert.equal(refused.code, 1, refused.out);
  assert.match(refused.err, /nothing done: the selection changed/);
  assert.deepEqual(await states('dry', id), ['A:published', 'C:pending', 'B:pending'], 'nothing was discarded');

  // Previewed again, confirmed with the new digest: exactly C and B, and the audit row names them.
  const again = await ferry(['dlq', 'discard', '--all-failed', '--dry-run', '--json', ...base()]);
  const digest = again.json<{ selection: { digest: string } }>().selection.digest;
  const done = await ferry(['dlq', 'discard', '--all-failed', '--yes', '--expect-selection', digest, '--json', ...base()]);
  assert.equal(done.code, 0, done.err);
  assert.deepEqual(done.json<{ discarded: string[] }>().discarded, again.json<{ wouldChange: string[] }>().wouldChange);
  assert.deepEqual(await states('dry', id), ['A:published', 'C:discarded', 'B:discarded']);
  const { rows } = await db.pool.query<{ filter: { changed: { rows: number; digest: string; ids: string[] } }; outcome: string }>(
    `SELECT filter, outcome FROM ${s}.operator_actions WHERE filter->>'previewDigest' = $1`,
    [digest],
  );
  assert.equal(rows.length, 1);
  assert.equal(rows[0]?.outcome, 'ok');
  assert.deepEqual(
    rows[0]?.filter.changed.ids.filter((x) => x === id('C') || x === id('B')),
    [id('C'), id('B')],
  );
  assert.equal(rows[0]?.filter.changed.digest, digest);
});

/** A failed parked event of billing's, as the inbox writes it; returns its job id. */
async function failedParked(key: string): Promise<string> {
  const id = (await boss.send(
    QUEUE,
    {
      format: 1,
      consumer: 'billing',
      mode: 'latest',
      stream: 'ORDERS',
      streamSeq: 1,
      natsSubject: 'orders.placed',
      headers: [],
      body: '',
      reason: 'handler-failed',
      error: 'Error: down',
      parkedAt: new Date().toISOString(),
      deliveries: 5,
      key,
      version: '1',
      type: 'OrderPlaced',
    },
    { singletonKey: key },
  )) as string;
  await setJobState(id, 'failed');
  return id;
}

async function setJobState(id: string, state: string): Promise<void> {
  const r = await db.pool.query(
    `UPDATE ${quoteIdentifier(bossSchemaFor(db.schema))}.job SET state = $2::text::${quoteIdentifier(bossSchemaFor(db.schema))}.job_state WHERE id = $1`,
    [id, state],
  );
  assert.equal(r.rowCount, 1);
}

async function jobStates(ids: string[]): Promise<string[]> {
  const { rows } = await db.pool.query<{ id: string; state: string }>(
    `SELECT id::text AS id, state::text AS state FROM ${quoteIdentifier(bossSchemaFor(db.schema))}.job WHERE id = ANY ($1::uuid[])`,
    [ids],
  );
  return ids.map((id) => rows.find((r) => r.id === id)?.state ?? 'gone');
}

function call(method: 'GET' | 'POST', path: string, form?: Array<[string, string]>): Promise<{ status: number; body: string }> {
  return consoleCall(server.url, TOKEN, method, path, form);
}

/** The hidden fields of a page, their values as a browser reads them (the attribute's entities decoded). */
function hiddenFields(html: string): Array<[string, string]> {
  const decode = (v: string) =>
    v.replace(/&(lt|gt|quot|#39|amp);/g, (_, e: string) => ({ lt: '<', gt: '>', quot: '"', '#39': "'", amp: '&' })[e] ?? '');
  return [...html.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)].map((m) => [m[1] as string, decode(m[2] as string)]);
}

/** The fields of the preview's confirmation form, as the browser posts them. */
function confirmForm(html: string): Array<[string, string]> {
  const form = /<form method="post" action="\/parked\/apply">([\s\S]*?)<\/form>/.exec(html)?.[1] ?? '';
  return hiddenFields(form);
}

test('console parked retry - a confirmation whose selection changed since the preview changes nothing and shows the new preview', async () => {
  const [a, b] = [await failedParked('p-a'), await failedParked('p-b')];
  const page = await call('GET', '/parked?consumer=billing');
  const csrf = /name="csrf" value="([^"]*)"/.exec(page.body)?.[1] ?? '';
  const preview = await call('POST', '/parked/preview', [
    ['csrf', csrf],
    ['action', 'retry'],
    ['consumer', 'billing'],
    ['id', a],
    ['id', b],
  ]);
  assert.equal(preview.status, 200, preview.body);
  assert.match(preview.body, /retries <b id="count">2<\/b> parked event\(s\)/);
  // Before the operator confirms, someone else retries A: the preview's two are no longer both failed.
  await setJobState(a, 'retry');
  const refused = await call('POST', '/parked/apply', confirmForm(preview.body));
  assert.equal(refused.status, 409, refused.body);
  assert.match(refused.body, /nothing done: the preview selected 2 parked event\(s\), now 1 match/);
  assert.match(refused.body, /retries <b id="count">1<\/b> parked event\(s\)/, 'the answer is the new preview');
  assert.deepEqual(await jobStates([a, b]), ['retry', 'failed'], 'B was not retried');
  const retried = await call('POST', '/parked/apply', confirmForm(refused.body));
  assert.equal(retried.status, 200, retried.body);
  assert.deepEqual(await jobStates([a, b]), ['retry', 'retry']);
  const { rows } = await db.pool.query<{ filter: { changed: { ids: string[] } }; outcome: string }>(
    `SELECT filter, outcome FROM ${s}.operator_actions WHERE action = 'parked.retry' ORDER BY id`,
  );
  assert.deepEqual(
    rows.map((r) => [r.outcome.replace(/:.*/, ''), r.filter.changed.ids]),
    [
      ['nothing done', []],
      ['ok', [b]],
    ],
  );
});

test('ferry inbox parked discard - --expect-selection holds the discard to what --dry-run showed', async () => {
  const [a, b] = [await failedParked('q-a'), await failedParked('q-b')];
  const args = ['inbox', 'parked', 'discard', a, b, '--consumer', 'billing', ...base()];
  const dry = await ferry([...args, '--dry-run', '--json']);
  assert.equal(dry.code, 0, dry.err);
  const shown = dry.json<{ wouldDiscard: Array<{ jobId: string }>; selection: { digest: string } }>();
  assert.deepEqual(shown.wouldDiscard.map((p) => p.jobId).sort(), [a, b].sort());
  // Meanwhile the park worker takes A (active): the discard must not go ahead with B alone.
  await setJobState(a, 'active');
  const refused = await ferry([...args, '--yes', '--expect-selection', shown.selection.digest]);
  assert.equal(refused.code, 1, refused.out);
  assert.match(refused.err, /nothing done: the selection changed since it was previewed/);
  assert.deepEqual(await jobStates([a, b]), ['active', 'failed'], 'nothing was discarded');
  await setJobState(a, 'failed');
  const done = await ferry([...args, '--yes', '--expect-selection', shown.selection.digest]);
  assert.equal(done.code, 0, done.err);
  assert.deepEqual(await jobStates([a, b]), ['gone', 'gone']);
});

/** Rows A, C, B on the stream's subjects, in seq order: A and B published, C pending. Returns their ids. */
async function acbPublished(key: string): Promise<Record<'A' | 'B' | 'C', string>> {
  const publisher = createPublisher({ schema: db.schema, source: 'confirm-selection' });
  const out: Record<string, string> = {};
  for (const name of ['A', 'C', 'B']) {
    const [row] = await withTransaction(db.pool, (tx) =>
      publisher.publishMany(tx, [{ subject: `${stream.prefix}.${key}.${name}`, key: `${key}-${name}`, type: 'Replayed', data: { name } }]),
    );
    out[name] = row?.id as string;
  }
  assert.equal(await markPublished(db.pool, db.schema, 'o.id = ANY ($1::uuid[])', [[out.A, out.B]]), 2);
  return out as Record<'A' | 'B' | 'C', string>;
}

/** Before the confirmation: A is pruned (its retention ran out), C is published. Still two rows match, not the two shown. */
async function swapAForC(ids: Record<'A' | 'B' | 'C', string>): Promise<void> {
  const pruned = await db.pool.query(`DELETE FROM ${s}.outbox WHERE id = $1`, [ids.A]);
  assert.equal(pruned.rowCount, 1);
  assert.equal(await markPublished(db.pool, db.schema, 'o.id = $1', [ids.C]), 1);
}

/** The copies of this test's rows in the stream (Nats-Msg-Id ending in :replay:…). */
async function copiesInStream(key: string): Promise<number> {
  const jsm = await jetstreamManager(stream.nc);
  const info = await jsm.streams.info(stream.name, { subjects_filter: `${stream.prefix}.${key}.>` });
  return Object.values(info.state.subjects ?? {}).reduce((a, b) => a + b, 0);
}

test('console replay - a confirmation whose selection changed since the preview (A pruned, C published) sends nothing and shows the new preview', async () => {
  const ids = await acbPublished('rc');
  const csrf = /name="csrf" value="([^"]*)"/.exec((await call('GET', `/events?subject=${stream.prefix}.rc.`)).body)?.[1] ?? '';
  const preview = await call('POST', '/replay/preview', [
    ['csrf', csrf],
    ['subject', `${stream.prefix}.rc.`],
  ]);
  assert.equal(preview.status, 200, preview.body);
  assert.match(preview.body, /This replays <b id="count">2<\/b> published event\(s\)/);
  await swapAForC(ids);
  const form = hiddenFields(preview.body);
  const refused = await call('POST', '/replay/apply', form);
  assert.equal(refused.status, 409, refused.body);
  assert.match(
    refused.body,
    /nothing done: the selection changed since the preview: 2 published event\(s\) match again, but not the same ones/,
  );
  assert.match(refused.body, /This replays <b id="count">2<\/b> published event\(s\)/, 'the answer is the new preview');
  assert.equal(await copiesInStream('rc'), 0, 'nothing was sent');
});

test('ferry replay - --expect-selection sends exactly what --dry-run showed, or nothing', async () => {
  const ids = await acbPublished('rx');
  const args = ['replay', '--subject-prefix', `${stream.prefix}.rx.`, '--nats-url', natsUrl(), ...base()];
  const dry = await ferry([...args, '--dry-run', '--json']);
  assert.equal(dry.code, 0, dry.err);
  const shown = dry.json<{ matched: number; selection: { rows: number; digest: string } }>();
  assert.deepEqual([shown.matched, shown.selection.rows], [2, 2]);
  await swapAForC(ids);
  const refused = await ferry([...args, '--yes', '--expect-selection', shown.selection.digest]);
  assert.equal(refused.code, 1, refused.out);
  assert.match(refused.err, /nothing done: the selection changed/);
  assert.equal(await copiesInStream('rx'), 0, 'nothing was sent');
  const again = (await ferry([...args, '--dry-run', '--json'])).json<{ selection: { digest: string } }>();
  const done = await ferry([...args, '--yes', '--expect-selection', again.selection.digest, '--json']);
  assert.equal(done.code, 0, done.err);
  assert.equal(done.json<{ replayed: number }>().replayed, 2);
  await waitFor(async () => (await copiesInStream('rx')) === 2, { what: 'the copies of C and B', timeoutMs: 10_000 });
  const { rows } = await db.pool.query<{ filter: { changed: { ids: string[] } }; outcome: string }>(
    `SELECT filter, outcome FROM ${s}.operator_actions WHERE action = 'replay' AND filter->>'previewDigest' = $1 ORDER BY id`,
    [again.selection.digest],
  );
  assert.deepEqual(
    rows.map((r) => [r.outcome.replace(/:.*/, ''), r.filter.changed.ids]),
    [
      ['started', [ids.C, ids.B]],
      ['ok', [ids.C, ids.B]],
    ],
  );
});
