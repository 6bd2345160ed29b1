import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, test } from 'node:test';
import { type Logger, quoteIdentifier, SILENT_LOGGER } from '@ferry/core';
import { findParkedElsewhere, type ParkedEvent, parkQueueName } from '@ferry/inbox';
import { startConsole } from '@ferry/relay';
import { PgBoss } from 'pg-boss';
import { type InboxFixture, inboxFixture } from './inbox-support.js';
import { ferry } from './ops-helpers.js';
import { FERRY_BIN } from './relay-helpers.js';

// Parked events left under an old pg-boss schema (earlier releases parked in `pgboss`; the default is now
// `<schema>_boss`) stay in view: ferry inbox parked list and the inbox at start say where they are. The
// "old" schema here is one of this test's own, given with --old-boss-schema / oldBossSchema, so the
// shared database's real `pgboss` (if any) is never touched.

let fx: InboxFixture;
let old: string;
const bosses: PgBoss[] = [];
let jobId = '';

async function startBoss(schema: string): Promise<PgBoss> {
  const boss = new PgBoss({ connectionString: fx.db.url, schema, supervise: false, schedule: false, max: 2 });
  boss.on('error', () => {});
  await boss.start();
  bosses.push(boss);
  return boss;
}

before(async () => {
  fx = await inboxFixture();
  old = `${fx.db.schema}_oldboss`;
  // What an earlier release left: consumer billing's parking lot in the old schema, one event of key k1
  // parked in sequential mode (so inbox_versions counts it).
  const boss = await startBoss(old);
  await boss.createQueue(parkQueueName('billing'), { policy: 'key_strict_fifo' });
  jobId =
    (await boss.send(
      parkQueueName('billing'),
      {
        // A parked job as every release writes it (format 1): read through the inbox's one decoder, which shows anything less as malformed.
        format: 1,
        consumer: 'billing',
        stream: 'ORDERS',
        streamSeq: 1,
        natsSubject: 'orders.set',
        headers: [],
        body: '',
        deliveries: 1,
        reason: 'handler-failed',
        error: 'billing was down',
        mode: 'sequential',
        key: 'k1',
        id: '00000000-0000-4000-8000-000000000001',
        version: '1',
        type: 'Set',
        parkedAt: new Date().toISOString(),
      },
      { singletonKey: 'k1' },
    )) ?? '';
  assert.ok(jobId);
  await fx.db.pool.query(`INSERT INTO ${fx.s}.inbox_versions (consumer, key, version, parked) VALUES ('billing', 'k1', 0, 1)`);
});

after(async () => {
  for (const b of bosses) await b.stop({ graceful: false }).catch(() => {});
  await fx?.db.pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(old)} CASCADE`).catch(() => {});
  await fx?.close();
});

const base = () => ['--database-url', fx.db.url, '--schema', fx.db.schema];

test('ferry inbox parked list - events parked under the old pg-boss schema are named with the fix, exit 1, even with no pg-boss in the current one', async () => {
  const r = await ferry(['inbox', 'parked', 'list', '--consumer', 'billing', '--old-boss-schema', old, ...base()]);
  assert.equal(r.code, 1, r.err);
  assert.equal(r.out, 'no parked events');
  assert.match(
    r.err,
    new RegExp(
      `consumer billing: parked events outside pg-boss schema "${fx.bossSchema}", where this inbox looks: 1 in pg-boss schema "${old}"`,
    ),
  );
  // The fix is the move, never the retry in the old schema or an inbox run on it (issue 43).
  assert.match(r.err, new RegExp(`ferry inbox parked move --from-boss-schema ${old} --consumer billing --schema ${fx.db.schema}`));
  assert.doesNotMatch(r.err, /bossSchema: '/);
  // Every consumer (no --consumer) is checked too.
  const all = await ferry(['inbox', 'parked', 'list', '--json', '--old-boss-schema', old, ...base()]);
  assert.equal(all.code, 1, all.err);
  assert.deepEqual(JSON.parse(all.out), [], 'stdout stays the JSON list of what the --boss-schema holds');
  assert.match(all.err, /consumer billing: parked events outside/);
});

test('console - the Parked page names parked events left under the old pg-boss schema, with the fix', async () => {
  const server = await startConsole({
    pool: fx.db.pool,
    schema: fx.db.schema,
    bossSchema: fx.bossSchema,
    oldBossSchema: old,
    host: '127.0.0.1',
    port: 0,
    readOnly: true,
    refreshMs: 1000,
  });
  try {
    const page = await (await fetch(`${server.url}/parked`)).text();
    const advice = /<p class="advice" data-out-of-view="billing">([^<]*)<\/p>/.exec(page)?.[1] ?? '';
    assert.match(advice, new RegExp(`1 in pg-boss schema &quot;${old}&quot;`));
    assert.match(advice, new RegExp(`ferry inbox parked move --from-boss-schema ${old} --consumer billing --schema ${fx.db.schema}`));
  } finally {
    await server.close();
  }
});

test('ferry doctor - parked events under the old pg-boss schema are a warning whose fix is the move', async () => {
  // On the consumer's schema: the inbox's tables alone (no outbox: doctor says so, and still looks).
  const r = await ferry(['doctor', '--json', '--old-boss-schema', old, '--nats-url', 'nats://127.0.0.1:1', ...base()]);
  const parked = r
    .json<{ findings: Array<{ check: string; status: string; message: string; fix?: string }> }>()
    .findings.filter((f) => f.check === 'parked');
  assert.equal(parked.length, 1, JSON.stringify(parked));
  assert.ok(
    r
      .json<{ findings: Array<{ check: string; message: string }> }>()
      .findings.some((f) => f.check === 'migrations' && /no outbox tables/.test(f.message)),
    'the missing outbox is reported too',
  );
  assert.equal(parked[0]?.status, 'warning');
  assert.match(parked[0]?.message ?? '', new RegExp(`consumer billing: .*1 in pg-boss schema "${old}"`));
  assert.match(
    parked[0]?.fix ?? '',
    new RegExp(`^ferry inbox parked move --from-boss-schema ${old} --consumer billing --schema ${fx.db.schema}$`),
  );
  // Told to look where they are, it finds nothing out of view.
  const there = await ferry([
    'doctor',
    '--json',
    '--boss-schema',
    old,
    '--old-boss-schema',
    old,
    '--nats-url',
    'nats://127.0.0.1:1',
    ...base(),
  ]);
  // Nothing out of view; the one event parked there is counted as parked (issue 43: doctor is never ok while events are parked).
  const there_ = there
    .json<{ findings: Array<{ check: string; status: string; message: string }> }>()
    .findings.filter((f) => f.check === 'parked');
  assert.deepEqual(
    there_.map((f) => [f.status, f.message]),
    [['warning', 'consumer billing: 1 parked event, 0 failed: the park worker retries them']],
  );
});

test('ferry console --old-boss-schema - the Parked page looks where it is told', async () => {
  // The console reads the outbox too: this schema held only the inbox's tables.
  assert.equal((await ferry(['migrate', ...base()])).code, 0);
  const proc = spawn(process.execPath, [FERRY_BIN, 'console', '--port', '0', '--read-only', '--old-boss-schema', old, ...base()], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  try {
    let out = '';
    proc.stdout.on('data', (b: Buffer) => {
      out += b.toString();
    });
    proc.stderr.on('data', (b: Buffer) => {
      out += b.toString();
    });
    const deadline = Date.now() + 20_000;
    while (!/ferry console on (http:\/\/\S+?)[;\s]/.test(out) && Date.now() < deadline && proc.exitCode === null) {
      await new Promise((r) => setTimeout(r, 50));
    }
    const url = /ferry console on (http:\/\/\S+?)[;\s]/.exec(out)?.[1];
    assert.ok(url, `ferry console printed where it listens: ${out.slice(0, 500)}`);
    const page = await (await fetch(`${url}/parked`)).text();
    assert.match(page, new RegExp(`1 in pg-boss schema &quot;${old}&quot;`));
  } finally {
    proc.kill('SIGTERM');
  }
});

test('ferry inbox parked list - pointed at the old schema with --boss-schema, it lists them and exits 0', async () => {
  const r = await ferry([
    'inbox',
    'parked',
    'list',
    '--consumer',
    'billing',
    '--boss-schema',
    old,
    '--old-boss-schema',
    old,
    '--json',
    ...base(),
  ]);
  assert.equal(r.code, 0, r.err);
  const rows = JSON.parse(r.out) as ParkedEvent[];
  assert.deepEqual(
    rows.map((p) => [p.jobId, p.key, p.version, p.reason]),
    [[jobId, 'k1', '1', 'handler-failed']],
  );
  assert.equal(r.err, '');
});

test('ferry inbox parked list - counted in inbox_versions but in no pg-boss schema it looks at: exit 1, saying to pass the inbox bossSchema', async () => {
  await startBoss(fx.bossSchema); // the current schema has a pg-boss now, and nothing parked in it
  const nowhere = `${fx.db.schema}_nowhere`;
  const r = await ferry(['inbox', 'parked', 'list', '--consumer', 'billing', '--old-boss-schema', nowhere, ...base()]);
  assert.equal(r.code, 1, r.err);
  assert.match(
    r.err,
    new RegExp(
      `consumer billing: inbox_versions counts 1 parked event\\(s\\) but pg-boss schema "${fx.bossSchema}" holds 0 \\(and "${nowhere}" none\\): pass the schema the inbox parked them in \\(its bossSchema option\\) as --boss-schema`,
    ),
  );
  const found = await findParkedElsewhere(fx.db.pool, { schema: fx.db.schema, bossSchema: fx.bossSchema, oldBossSchemas: [old] });
  assert.deepEqual(
    found.map((f) => [f.consumer, f.here, f.counted, f.elsewhere]),
    [['billing', 0, 1, [{ bossSchema: old, jobs: 1 }]]],
  );
});

test('inbox - at start, a warning says where parked events of its consumer are when they are under the old pg-boss schema', async () => {
  const warnings: Array<{ obj: Record<string, unknown>; msg?: string }> = [];
  const logger: Logger = {
    ...SILENT_LOGGER,
    warn: (obj: object, msg?: string) => warnings.push({ obj: obj as Record<string, unknown>, msg }),
    child: () => logger,
  };
  const inbox = fx.inbox({ mode: 'sequential', logger, oldBossSchema: old, handlers: { Set: async () => {} } });
  await inbox.start();
  await inbox.stop();
  const w = warnings.find((x) => /parked events outside pg-boss schema/.test(x.msg ?? ''));
  assert.ok(w, `a warning about the old schema, got ${JSON.stringify(warnings.map((x) => x.msg))}`);
  assert.match(w.msg ?? '', new RegExp(`1 in pg-boss schema "${old}"`));
  assert.deepEqual(w.obj.elsewhere, [{ bossSchema: old, jobs: 1 }]);
  // Told not to look (oldBossSchema: false), and with the count matched by the schema in use, it says nothing.
  warnings.length = 0;
  const quiet = fx.inbox({ mode: 'sequential', logger, bossSchema: old, oldBossSchema: false, handlers: { Set: async () => {} } });
  await quiet.start();
  await quiet.stop();
  assert.deepEqual(
    warnings.filter((x) => /parked events/.test(x.msg ?? '')),
    [],
  );
});
