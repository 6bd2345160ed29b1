// Issue 43 item 2: parked events in an old pg-boss schema. Earlier releases parked in `pgboss`; an
// inbox now works `<schema>_boss`. `parked retry --boss-schema <old>` said "retried 1 of 1" and
// nothing ran it; running the inbox on the old schema parked new events there while others sat in
// the new one, so a key's parked events split and it was stuck. `ferry inbox parked move` puts them
// where the inbox works. The old schema is one of this test's own (a pg-boss 12 installed by an
// inbox started on it), never the shared database's `pgboss`.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { type Logger, quoteIdentifier, SILENT_LOGGER } from '@ferry/core';
import { type Inbox, parkQueueName } from '@ferry/inbox';
import { waitFor } from '@ferry/testkit';
import { PgBoss } from 'pg-boss';
import { EFFECT_SQL, ferryEvent, type InboxFixture, inboxFixture, publishEvents } from './inbox-support.js';
import { ferry } from './ops-helpers.js';

let fx: InboxFixture | undefined;
let old = '';
let fx2: InboxFixture | undefined;
let old2 = '';
const bosses: PgBoss[] = [];
after(async () => {
  for (const b of bosses) await b.stop({ graceful: false }).catch(() => {});
  for (const [f, o] of [
    [fx, old],
    [fx2, old2],
  ] as const) {
    await f?.db.pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(o)} CASCADE`).catch(() => {});
    await f?.close();
  }
});

const QUEUE = parkQueueName('billing');

test('ferry inbox parked move - parked events split across an old and the current pg-boss schema all apply once, in per-key order, while the inbox runs; a second move changes nothing', async () => {
  fx = await inboxFixture();
  const f = fx;
  old = `${f.db.schema}_oldboss`;
  const base = ['--database-url', f.db.url, '--schema', f.db.schema, '--consumer', 'billing'];
  // The audit trail (operator_actions) is an outbox migration: this schema holds both.
  assert.equal((await ferry(['migrate', '--database-url', f.db.url, '--schema', f.db.schema])).code, 0);
  /** Keys whose handler fails (their dependency is down). */
  const down = new Set<string>();
  const handlers = {
    Set: async (event: { key: string; version: bigint }, { tx }: { tx: { query: (t: string, v: unknown[]) => Promise<unknown> } }) => {
      if (down.has(event.key)) throw new Error(`dependency of ${event.key} is down`);
      await tx.query(EFFECT_SQL(f.s).effect, [event.key, event.version.toString()]);
    },
  };
  const publish = (key: string, ...versions: number[]) =>
    publishEvents(
      f.stream.nc,
      versions.map((version) => ferryEvent(f.stream.prefix, { key, version })),
    );
  const common = { mode: 'sequential' as const, handlers, maxDeliver: 1, parkRetryLimit: 1, parkRetryDelayMs: 1_000, gapTimeoutMs: 60_000 };
  /** An inbox of an earlier release: it parks in (and works) the old schema. */
  const oldInbox = (): Inbox => f.inbox({ ...common, bossSchema: old, oldBossSchema: false });
  const jobs = async (schema: string) =>
    (
      await f.db.pool.query<{ state: string; key: string; version: string }>(
        `SELECT state::text AS state, data->>'key' AS key, data->>'version' AS version FROM ${quoteIdentifier(schema)}.job
          WHERE name = $1 AND state::text IN ('created', 'retry', 'active', 'failed') ORDER BY data->>'key', (data->>'version')::numeric`,
        [QUEUE],
      )
    ).rows;
  const settledIn = async (schema: string, live: number, failed: number) => {
    const j = await jobs(schema);
    return j.length === live && j.filter((x) => x.state === 'failed').length === failed && !j.some((x) => x.state === 'active');
  };

  // Before the upgrade: k1 v1 fails and parks in the old schema, v2 behind it; k2 v1 too.
  down.add('k1').add('k2');
  const a = oldInbox();
  await a.start();
  await publish('k1', 1, 2);
  await publish('k2', 1);
  await waitFor(() => settledIn(old, 3, 2), { timeoutMs: 60_000, what: 'k1 v1 and k2 v1 failed in the old schema, k1 v2 behind' });
  await a.stop();

  // The upgrade: the inbox now parks in <schema>_boss. Its dependency is back; k1's and k2's new
  // versions park behind the old ones, into the new schema, and wait there for versions it never sees.
  down.clear();
  const warnings: string[] = [];
  const logger: Logger = { ...SILENT_LOGGER, warn: (_o: object, msg?: string) => warnings.push(msg ?? ''), child: () => logger };
  let b = f.inbox({ ...common, oldBossSchema: old, logger });
  await b.start();
  const move = `ferry inbox parked move --from-boss-schema ${old} --consumer billing --schema ${f.db.schema}`;
  assert.ok(
    warnings.some((w) => w.includes(move)),
    `the start warning names the move: ${JSON.stringify(warnings)}`,
  );
  await publish('k1', 3, 4);
  await publish('k2', 2);
  await publish('k3', 1, 2);
  await waitFor(() => settledIn(f.bossSchema, 3, 2), { timeoutMs: 60_000, what: 'k1 v3 and k2 v2 failed (gap) in the new schema' });
  await b.stop();

  // After the upgrade, an inbox run on the old schema (the fix the docs used to give) parks into it again.
  down.add('k4');
  const c = oldInbox();
  await c.start();
  await publish('k1', 5);
  await publish('k4', 1);
  await waitFor(async () => (await jobs(old)).length === 5 && (await settledIn(old, 5, 3)), {
    timeoutMs: 60_000,
    what: 'k1 v5 parked behind in the old schema, k4 v1 failed there',
  });
  await c.stop();
  down.clear();
  assert.deepEqual(
    (await f.effects()).map((e) => `${e.key}:${e.version}`),
    ['k3:1', 'k3:2'],
    'stuck: k1 and k2 have parked events in two schemas',
  );

  // parked list names the move; retry in the old schema is refused with it.
  const listed = await ferry(['inbox', 'parked', 'list', '--old-boss-schema', old, ...base]);
  assert.equal(listed.code, 1, listed.err);
  assert.ok(listed.err.includes(move), listed.err);
  const oldIds = (
    await f.db.pool.query<{ id: string }>(`SELECT id::text AS id FROM ${quoteIdentifier(old)}.job WHERE name = $1 AND state = 'failed'`, [
      QUEUE,
    ])
  ).rows.map((r) => r.id);
  const retry = await ferry(['inbox', 'parked', 'retry', '--boss-schema', old, '--yes', ...base, ...oldIds]);
  assert.equal(retry.code, 2, `a retry nothing would run is refused: ${retry.out} ${retry.err}`);
  assert.doesNotMatch(retry.out, /retried/);
  assert.ok(retry.err.includes(`ferry inbox parked move --from-boss-schema ${old} --consumer billing`), retry.err);

  // The move, while the inbox runs and new events arrive.
  b = f.inbox({ ...common, oldBossSchema: old });
  await b.start();
  const dry = await ferry(['inbox', 'parked', 'move', '--from-boss-schema', old, '--dry-run', '--json', ...base]);
  assert.equal(dry.code, 0, dry.err);
  const preview = dry.json<{ wouldMove: Array<{ key: string; version: string }>; selection: { digest: string; rows: number } }>();
  assert.deepEqual(
    preview.wouldMove.map((p) => `${p.key}:${p.version}`),
    ['k1:1', 'k1:2', 'k1:5', 'k2:1', 'k4:1'],
  );
  assert.equal((await jobs(old)).length, 5, '--dry-run moves nothing');
  const moving = ferry([
    'inbox',
    'parked',
    'move',
    '--from-boss-schema',
    old,
    '--yes',
    '--expect-selection',
    preview.selection.digest,
    ...base,
  ]);
  await publish('k1', 6);
  await publish('k3', 3);
  const moved = await moving;
  assert.equal(moved.code, 0, moved.err);
  assert.match(
    moved.out,
    new RegExp(`moved 5 parked event\\(s\\) of consumer billing from pg-boss schema "${old}" into "${f.bossSchema}"`),
  );

  const expected = ['k1:1', 'k1:2', 'k1:3', 'k1:4', 'k1:5', 'k1:6', 'k2:1', 'k2:2', 'k3:1', 'k3:2', 'k3:3', 'k4:1'];
  await waitFor(async () => (await f.effects()).length >= expected.length, { timeoutMs: 90_000, what: 'every event applied' });
  await waitFor(() => settledIn(f.bossSchema, 0, 0), { timeoutMs: 30_000, what: 'the parking lot empty' });
  assert.deepEqual(
    (await f.effects()).map((e) => `${e.key}:${e.version}`),
    expected,
    'every event applied once',
  );
  const { rows: order } = await f.db.pool.query<{ key: string; versions: string[] }>(
    `SELECT e.key, array_agg(e.version::text ORDER BY e.applied_at, e.version) AS versions FROM ${f.s}.effects e GROUP BY e.key ORDER BY e.key`,
  );
  for (const r of order)
    assert.deepEqual(
      r.versions.map(Number),
      [...r.versions.map(Number)].sort((x, y) => x - y),
      `key ${r.key} applied in version order`,
    );

  // Once: a second move finds nothing, and changes nothing.
  const again = await ferry(['inbox', 'parked', 'move', '--from-boss-schema', old, '--yes', ...base]);
  assert.equal(again.code, 0, again.err);
  assert.match(again.out, /moved 0 parked event\(s\)/);
  assert.equal((await f.effects()).length, expected.length);
  assert.equal((await ferry(['inbox', 'parked', 'list', '--old-boss-schema', old, ...base])).code, 0, 'nothing out of view');

  const { rows: audit } = await f.db.pool.query<{ rows: number; outcome: string; filter: { fromBossSchema: string } }>(
    `SELECT rows, outcome, filter FROM ${f.s}.operator_actions WHERE action = 'parked.move' ORDER BY id`,
  );
  assert.deepEqual(
    audit.map((x) => [x.rows, x.outcome, x.filter.fromBossSchema]),
    [
      [5, 'ok', old],
      [0, 'ok', old],
    ],
    'each move is in the audit trail',
  );
});

test('ferry inbox parked move - a key an old-schema inbox is retrying now, and a job that is not a parked event, are left and named (exit 1); a changed selection moves nothing', async () => {
  fx2 = await inboxFixture();
  const f = fx2;
  old2 = `${f.db.schema}_oldboss`;
  const base = ['--database-url', f.db.url, '--schema', f.db.schema, '--consumer', 'billing'];
  const boss = async (schema: string, queue = true) => {
    const b = new PgBoss({ connectionString: f.db.url, schema, supervise: false, schedule: false, max: 2 });
    b.on('error', () => {});
    await b.start();
    bosses.push(b);
    if (queue) await b.createQueue(QUEUE, { policy: 'key_strict_fifo' });
    return b;
  };
  const oldBoss = await boss(old2);
  const parked = (key: string, version: number) => ({
    format: 1,
    consumer: 'billing',
    mode: 'latest',
    stream: 'ORDERS',
    streamSeq: version,
    natsSubject: 'orders.set',
    headers: [],
    body: '',
    deliveries: 1,
    reason: 'handler-failed',
    error: 'billing was down',
    key,
    version: String(version),
    parkedAt: new Date().toISOString(),
  });
  const busy = await oldBoss.send(QUEUE, parked('busy', 1), { singletonKey: 'busy' });
  await oldBoss.send(QUEUE, parked('busy', 2), { singletonKey: 'busy' });
  const free = await oldBoss.send(QUEUE, parked('free', 1), { singletonKey: 'free' });
  const junk = await oldBoss.send(QUEUE, { not: 'a parked event' }, { singletonKey: 'junk' });
  // An inbox still running on the old schema holds key busy's head right now.
  await f.db.pool.query(`UPDATE ${quoteIdentifier(old2)}.job SET state = 'active', started_on = now() WHERE name = $1 AND id = $2`, [
    QUEUE,
    busy,
  ]);
  const move = (...extra: string[]) => ferry(['inbox', 'parked', 'move', '--from-boss-schema', old2, ...extra, ...base]);

  // A pg-boss where they would go, but no parking lot of the consumer in it yet (its inbox never ran there).
  const newBoss = await boss(f.bossSchema, false);
  const noQueue = await move('--yes');
  assert.equal(noQueue.code, 2, 'no parking lot where it would move them: refused');
  assert.match(noQueue.err, /consumer billing has no parking lot in pg-boss schema .*: start its inbox once with bossSchema/);
  await newBoss.createQueue(QUEUE, { policy: 'key_strict_fifo' });
  const same = await ferry(['inbox', 'parked', 'move', '--from-boss-schema', f.bossSchema, '--yes', ...base]);
  assert.equal(same.code, 2);
  assert.match(same.err, /is the pg-boss schema the jobs would move into/);

  const dry = (await move('--dry-run', '--json')).json<{ wouldMove: Array<{ jobId: string }>; selection: { digest: string } }>();
  assert.deepEqual(
    dry.wouldMove.map((p) => p.jobId),
    [free],
  );
  // Parked in the old schema after the preview: the confirmed selection is not the one found, nothing moves.
  await oldBoss.send(QUEUE, parked('late', 1), { singletonKey: 'late' });
  const changed = await move('--yes', '--expect-selection', dry.selection.digest);
  assert.equal(changed.code, 1, changed.err);
  assert.match(changed.err, /selection/i);
  assert.deepEqual(await newBoss.findJobs(QUEUE), [], 'nothing moved');

  const r = await move('--yes');
  assert.equal(r.code, 1, r.err);
  assert.match(r.out, /moved 2 parked event\(s\)/);
  assert.match(r.err, /left \(an inbox on pg-boss schema .* is retrying its key now; move again\)/);
  assert.match(
    r.err,
    new RegExp(
      `left \\(not a Ferry parked event; discard it there with ferry inbox parked discard --boss-schema ${old2} --consumer billing ${junk}\\)`,
    ),
  );
  const there = (await newBoss.findJobs(QUEUE))
    .map((j) => [j.id, j.singletonKey, j.state])
    .sort((a, b) => String(a[1]).localeCompare(String(b[1])));
  assert.deepEqual(
    there.map(([, key, state]) => [key, state]),
    [
      ['free', 'created'],
      ['late', 'created'],
    ],
  );
  assert.ok(
    there.some(([id]) => id === free),
    'moved with its id',
  );
  const left = await f.db.pool.query<{ key: string }>(
    `SELECT singleton_key AS key FROM ${quoteIdentifier(old2)}.job WHERE name = $1 ORDER BY singleton_key`,
    [QUEUE],
  );
  assert.deepEqual(
    left.rows.map((x) => x.key),
    ['busy', 'busy', 'junk'],
    'the busy key whole, and the malformed job, stay',
  );
});
