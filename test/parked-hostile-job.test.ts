import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { bossSchemaFor, quoteIdentifier, relayBossSchemaFor, SQLSTATE, sqlState } from '@ferry/core';
import { type ConsoleServer, startConsole } from '@ferry/relay';
import { createTestDatabase, type TestDatabase, uniqueName } from '@ferry/testkit';
import pg from 'pg';
import { PgBoss } from 'pg-boss';
import { consoleCall } from './console-call.js';
import { ferry } from './ops-helpers.js';

// Issue 42, item 7: the shipping inbox role, confined to its consumer by row-level security, shares
// the pg-boss schema (the parking lot) with billing, so it can insert a job into billing's park
// queue. A job `{format:1, headers:[null]}` made billing's Parked page answer 500 "object null is
// not iterable". Now such a job is shown as malformed (its JSON, escaped) and every other row
// stays usable and actionable, in the console and the CLI; and a boss schema per consumer keeps
// the shipping role out of billing's queue altogether.

const TOKEN = 'parked-hostile-job-token-0123456789';
const QUEUE = 'ferry.inbox.billing.parked';
let db: TestDatabase;
let bossSchema: string;
let shippingBossSchema: string;
let server: ConsoleServer;
const roles = { shipping: uniqueName('phs'), shippingOwnBoss: uniqueName('phso') };
const pools: pg.Pool[] = [];
/** Job ids: a well-formed parked event of billing's, and what the shipping role slipped in. */
const jobs = { good: '', goodFailed: '', issue: '', script: '', huge: '' };

function poolAs(role: string): pg.Pool {
  const u = new URL(db.url);
  u.username = role;
  u.password = '';
  const p = new pg.Pool({ connectionString: u.toString(), max: 1 });
  pools.push(p);
  return p;
}

/** A parked event as the inbox writes it (park.ts messageData). */
function parkedData(key: string) {
  return {
    format: 1,
    consumer: 'billing',
    mode: 'latest',
    stream: 'ORDERS',
    streamSeq: 1,
    natsSubject: 'orders.placed',
    headers: [['ce-partitionkey', key]],
    body: Buffer.from('{"total":1}').toString('base64'),
    reason: 'handler-failed',
    error: 'Error: the ledger is down',
    parkedAt: new Date().toISOString(),
    deliveries: 5,
    key,
    version: '1',
    type: 'OrderPlaced',
  };
}

before(async () => {
  db = await createTestDatabase({ prefix: 'parked_hostile', migrate: [] });
  await db.pool.query(`DROP SCHEMA ${quoteIdentifier(db.schema)}`);
  bossSchema = bossSchemaFor(db.schema);
  shippingBossSchema = `${db.schema}_shipping_boss`;
  const base = ['--database-url', db.url, '--schema', db.schema];
  for (const args of [
    ['migrate', ...base, '--lanes', '2', '--boss'],
    ['migrate', ...base, '--inbox', '--boss'],
    // The separation: shipping's own pg-boss schema (its inbox's bossSchema option).
    ['migrate', ...base, '--inbox', '--boss', '--boss-schema', shippingBossSchema],
  ]) {
    const r = await ferry(args);
    assert.equal(r.code, 0, r.err);
  }
  // Billing's parking lot holds two well-formed parked events, one of them failed (holding its key).
  const boss = new PgBoss({ connectionString: db.url, schema: bossSchema, max: 1, supervise: false, schedule: false });
  boss.on('error', () => {});
  await boss.start();
  try {
    await boss.createQueue(QUEUE, { policy: 'key_strict_fifo', retryLimit: 0 });
    jobs.good = (await boss.send(QUEUE, parkedData('order-1'), { singletonKey: 'order-1' })) as string;
    jobs.goodFailed = (await boss.send(QUEUE, parkedData('order-2'), { singletonKey: 'order-2' })) as string;
    await db.pool.query(`UPDATE ${quoteIdentifier(bossSchema)}.job SET state = 'failed' WHERE id = $1`, [jobs.goodFailed]);
  } finally {
    await boss.stop({ graceful: false, close: true });
  }
  for (const [role, extra] of [
    [roles.shipping, []],
    [roles.shippingOwnBoss, ['--boss-schema', shippingBossSchema]],
  ] as const) {
    await db.pool.query(`CREATE ROLE ${quoteIdentifier(role)} LOGIN`);
    const r = await ferry([
      'migrate',
      '--print-grants',
      '--role',
      role,
      '--schema',
      db.schema,
      '--for',
      'inbox',
      '--consumer',
      'shipping',
      ...extra,
    ]);
    assert.equal(r.code, 0, r.err);
    await db.pool.query(r.out);
  }
  server = await startConsole({
    pool: db.pool,
    schema: db.schema,
    bossSchema,
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
  for (const p of pools) await p.end().catch(() => {});
  for (const schema of [db.schema, bossSchema, shippingBossSchema, relayBossSchemaFor(db.schema)]) {
    await db.pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(schema)} CASCADE`);
  }
  for (const role of Object.values(roles)) {
    await db.pool.query(`DROP OWNED BY ${quoteIdentifier(role)}`).catch(() => {});
    await db.pool.query(`DROP ROLE IF EXISTS ${quoteIdentifier(role)}`);
  }
  await db.close();
});

function call(method: 'GET' | 'POST', path: string, form?: Record<string, string | string[]>): Promise<{ status: number; body: string }> {
  return consoleCall(server.url, TOKEN, method, path, form);
}

const field = (html: string, name: string) => new RegExp(`name="${name}" value="([^"]*)"`).exec(html)?.[1];
/** The exact selection a preview's confirmation carries (none before issue 42's item 3). */
const confirmation = (html: string): Record<string, string> =>
  Object.fromEntries(
    ['expect_rows', 'expect_digest'].flatMap((k) => (field(html, k) === undefined ? [] : [[k, field(html, k) as string]])),
  );

async function jobState(id: string): Promise<string | undefined> {
  const { rows } = await db.pool.query<{ state: string }>(`SELECT state::text FROM ${quoteIdentifier(bossSchema)}.job WHERE id = $1`, [id]);
  return rows[0]?.state;
}

test('parked - the shipping role writes jobs into billing’s park queue in the shared pg-boss schema (the hazard docs/security.md names)', async () => {
  const shipping = poolAs(roles.shipping);
  const insert = async (data: string) => {
    const { rows } = await shipping.query<{ id: string }>(
      `INSERT INTO ${quoteIdentifier(bossSchema)}.job (name, data, state) VALUES ($1, $2::jsonb, 'failed') RETURNING id::text`,
      [QUEUE, data],
    );
    return rows[0]?.id as string;
  };
  jobs.issue = await insert('{"format":1,"headers":[null]}');
  jobs.script = await insert(
    JSON.stringify({
      ...parkedData('x'),
      key: '<img src=x onerror=alert(1)>',
      headers: 'not an array',
      note: '</pre><script>alert(1)</script>\u0085\u202e',
    }),
  );
  jobs.huge = await insert(JSON.stringify({ ...parkedData('y'), key: 'k'.repeat(2_000_000) }));
  assert.equal(await jobState(jobs.issue), 'failed');
});

test('parked - a malformed job is shown as malformed on billing’s Parked page, and the other rows stay actionable', async () => {
  const page = await call('GET', '/parked?consumer=billing');
  assert.equal(page.status, 200, page.body.slice(0, 2000));
  const row = (id: string) => new RegExp(`<tr data-job="${id}"[^>]*>[\\s\\S]*?</td></tr>`).exec(page.body)?.[0] ?? '';
  assert.match(row(jobs.issue), /data-malformed/);
  assert.match(row(jobs.issue), /not a Ferry parked event: consumer is not a consumer name/);
  assert.match(row(jobs.issue), /<pre class="malformed">\{&quot;format&quot;:1,&quot;headers&quot;:\[null\]\}<\/pre>/);
  assert.match(row(jobs.script), /headers is not an array/);
  assert.doesNotMatch(page.body, /<img src=x|<script>alert/, 'the stored markup is escaped');
  assert.match(row(jobs.script), /&lt;\/pre&gt;&lt;script&gt;alert\(1\)&lt;\/script&gt;\\u0085\\u202e/);
  assert.match(row(jobs.huge), /key is not an event key/);
  assert.ok(row(jobs.huge).length < 20_000, `the huge job's row is bounded: ${row(jobs.huge).length} characters`);
  assert.match(row(jobs.good), /order-1/);
  assert.match(row(jobs.goodFailed), /the ledger is down/);

  // The good failed row is retried through preview and confirmation; the issue's job is discarded the same way.
  const csrf = field(page.body, 'csrf') ?? '';
  const preview = await call('POST', '/parked/preview', { csrf, action: 'retry', consumer: 'billing', id: jobs.goodFailed });
  assert.equal(preview.status, 200, preview.body);
  const retried = await call('POST', '/parked/apply', {
    csrf,
    action: 'retry',
    consumer: 'billing',
    id: jobs.goodFailed,
    ...confirmation(preview.body),
  });
  assert.equal(retried.status, 200, retried.body);
  assert.match(retried.body, /Retried <b id="done">1<\/b>/);
  assert.equal(await jobState(jobs.goodFailed), 'retry');
  const discardPreview = await call('POST', '/parked/preview', { csrf, action: 'discard', consumer: 'billing', id: jobs.issue });
  assert.equal(discardPreview.status, 200, discardPreview.body);
  const discarded = await call('POST', '/parked/apply', {
    csrf,
    action: 'discard',
    consumer: 'billing',
    id: jobs.issue,
    ...confirmation(discardPreview.body),
  });
  assert.equal(discarded.status, 200, discarded.body);
  assert.equal(await jobState(jobs.issue), undefined, 'the malformed job is gone');
});

test('parked - ferry inbox parked list shows a malformed job as such; retry and discard act on the rows around it', async () => {
  const base = ['--database-url', db.url, '--schema', db.schema, '--consumer', 'billing'];
  const list = await ferry(['inbox', 'parked', 'list', ...base]);
  assert.equal(list.code, 0, list.err);
  assert.match(list.out, new RegExp(`${jobs.script}  billing failed \\(malformed: headers is not an array\\)`));
  assert.match(list.out, /\\u0085\\u202e/, 'control and bidi characters are escaped for the terminal');
  assert.doesNotMatch(list.out, /[\u0080-\u009f\u202e]/);
  assert.match(list.out, /key=order-1 v1 OrderPlaced/);
  const json = await ferry(['inbox', 'parked', 'list', '--json', ...base]);
  const rows = JSON.parse(json.out) as Array<{ jobId: string; malformed?: { problem: string } }>;
  assert.match(rows.find((r) => r.jobId === jobs.huge)?.malformed?.problem ?? '', /key is not an event key/);
  assert.equal(rows.find((r) => r.jobId === jobs.good)?.malformed, undefined);

  const discard = await ferry(['inbox', 'parked', 'discard', jobs.good, jobs.script, '--yes', ...base]);
  assert.equal(discard.code, 0, discard.err);
  assert.match(discard.out, /discarded 2 of 2/);
  assert.equal(await jobState(jobs.good), undefined);
  assert.equal(await jobState(jobs.script), undefined);
  const retry = await ferry(['inbox', 'parked', 'retry', jobs.huge, '--yes', ...base]);
  assert.equal(retry.code, 0, retry.err);
  assert.equal(await jobState(jobs.huge), 'retry', 'a malformed job can be retried too (its park worker then fails it as poison)');
});

test('parked - with a pg-boss schema of its own, the shipping role cannot write billing’s park queue: permission denied', async () => {
  const separated = poolAs(roles.shippingOwnBoss);
  const tries = [
    `INSERT INTO ${quoteIdentifier(bossSchema)}.job (name, data) VALUES ('${QUEUE}', '{"format":1,"headers":[null]}')`,
    `SELECT data FROM ${quoteIdentifier(bossSchema)}.job`,
    `DELETE FROM ${quoteIdentifier(bossSchema)}.job`,
  ];
  for (const sql of tries) {
    const got = await separated.query(sql).then(
      () => 'ok',
      (err: unknown) => sqlState(err),
    );
    assert.equal(got, SQLSTATE.insufficientPrivilege, sql);
  }
  // Its own parking lot is its to use.
  const own = new PgBoss({
    db: { executeSql: (text: string, values?: unknown[]) => separated.query(text, values as unknown[]) },
    schema: shippingBossSchema,
    supervise: false,
    schedule: false,
    migrate: false,
    createSchema: false,
  });
  own.on('error', () => {});
  await own.start();
  try {
    await own.createQueue('ferry.inbox.shipping.parked');
    assert.ok(await own.send('ferry.inbox.shipping.parked', parkedData('s-1')));
  } finally {
    await own.stop({ graceful: false, close: false });
  }
});
