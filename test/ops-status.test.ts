import assert from 'node:assert/strict';
import { hostname } from 'node:os';
import { after, before, test } from 'node:test';
import { quoteIdentifier, RELAY_PROTOCOL } from '@ferry/core';
import { createRelay, type Relay } from '@ferry/relay';
import { createTestDatabase, createTestStream, databaseUrl, type TestDatabase, type TestStream, uniqueName, waitFor } from '@ferry/testkit';
import { setFailed } from './delivery-state.js';
import { ferry } from './ops-helpers.js';
import { countPending, publishEvents } from './relay-helpers.js';

interface StatusReport {
  schema: string;
  laneCount: number;
  pending: number;
  dead: number;
  oldestPendingSeconds: number;
  publishedLastMinute: number;
  lanes: Array<{
    lane: number;
    pending: number;
    dead: number;
    oldestPendingSeconds: number;
    owner: string | null;
    epoch: string;
    leaseAgeSeconds: number | null;
    overdue: boolean;
  }>;
  instances: Array<{ instance: string; pid: number; relayPid: number | null; host: string | null; lanes: number[] }>;
  unownedLanesWithBacklog: number[];
}

let db: TestDatabase;
let stream: TestStream;
const relays: Relay[] = [];
before(async () => {
  db = await createTestDatabase({ prefix: 'ops_status', lanes: 4 });
  stream = await createTestStream({ prefix: 'OPSST' });
});
after(async () => {
  for (const r of relays) await r.stop();
  await stream.close();
  await db.close();
});

const args = () => ['status', '--database-url', db.url, '--schema', db.schema];

test('ferry status - --help lists the options and the exit codes', async () => {
  const r = await ferry(['status', '--help']);
  assert.equal(r.code, 0);
  for (const s of ['--database-url', '--schema', '--json', '--check', 'needs a person', 'Exit codes', 'FERRY_SCHEMA'])
    assert.ok(r.out.includes(s), `help mentions ${s}`);
});

test('ferry status - without a relay: backlog per lane, the dead event and the lanes nobody owns', async () => {
  await publishEvents(db.pool, db.schema, stream.prefix, 30, { keys: 10 });
  const first = `o.seq = (SELECT min(seq) FROM ${quoteIdentifier(db.schema)}.outbox)`;
  assert.equal(await setFailed(db.pool, db.schema, first, [], { attempts: 25, lastError: 'test', dead: true }), 1);
  const r = await ferry([...args(), '--json']);
  assert.equal(r.code, 0, r.err);
  const s = r.json<StatusReport>();
  assert.equal(s.schema, db.schema);
  assert.equal(s.laneCount, 4);
  assert.equal(s.lanes.length, 4);
  assert.equal(s.pending, 29);
  assert.equal(s.dead, 1);
  assert.equal(
    s.lanes.reduce((a, l) => a + l.pending, 0),
    29,
  );
  assert.ok(s.oldestPendingSeconds >= 0 && s.oldestPendingSeconds < 60, `oldest ${s.oldestPendingSeconds}`);
  assert.equal(s.publishedLastMinute, 0);
  assert.deepEqual(s.instances, []);
  assert.deepEqual(
    s.unownedLanesWithBacklog,
    s.lanes.filter((l) => l.pending > 0).map((l) => l.lane),
  );
  assert.ok(s.lanes.every((l) => l.owner === null));
  const human = await ferry(args());
  assert.equal(human.code, 0);
  assert.match(human.out, /pending 29, oldest .*, dead 1, published in the last minute 0/);
  assert.match(human.out, /relay instances alive: 0/);
  assert.match(human.out, /have pending events and no relay/);
  assert.match(human.out, /1 dead event blocks its key: see ferry dlq list/);
  // Issue 29: a script can tell. Plain status read fine: 0; --check: 1, naming what needs a person.
  const check = await ferry([...args(), '--check']);
  assert.equal(check.code, 1, check.err);
  assert.match(
    check.err,
    /needs a person: 1 dead event \(ferry dlq list\); 1 blocked key .*; \d lanes? with pending events and no live relay/,
  );
  assert.match(check.out, /pending 29/, 'the status is printed as without --check');
});

test('ferry status --check - a healthy outbox exits 0', async () => {
  const clean = await createTestDatabase({ prefix: 'ops_status_ok', lanes: 2 });
  try {
    const r = await ferry(['status', '--database-url', clean.url, '--schema', clean.schema, '--check']);
    assert.equal(r.code, 0, r.err);
    assert.equal(r.err, '');
  } finally {
    await clean.close();
  }
});

test('ferry status - two relays: each instance with the lanes it leases, and the events published in the last minute', async () => {
  for (let i = 0; i < 2; i++) {
    const relay = createRelay({
      databaseUrl: db.url,
      schema: db.schema,
      nats: { servers: stream.nc.getServer() },
      maintenance: false,
      pollIntervalMs: 100,
    });
    relays.push(relay);
    await relay.start();
  }
  // The dead event blocks its key: k0's two later events wait behind it.
  await waitFor(async () => (await countPending(db.pool, db.schema)) === 3, { timeoutMs: 20_000, what: 'every unblocked event published' });
  await waitFor(async () => relays.every((r) => r.lanes.length === 2), { timeoutMs: 20_000, what: 'two lanes each' });
  const s = (await ferry([...args(), '--json'])).json<StatusReport>();
  assert.equal(s.pending, 2);
  assert.equal(s.dead, 1);
  assert.equal(s.publishedLastMinute, 27);
  assert.equal(s.instances.length, 2);
  assert.deepEqual(s.instances.map((i) => i.instance).sort(), relays.map((r) => r.instanceId).sort());
  for (const i of s.instances) {
    const relay = relays.find((r) => r.instanceId === i.instance);
    assert.deepEqual(i.lanes, [...(relay?.lanes ?? [])], `instance ${i.instance} lanes`);
    assert.ok(i.pid > 0);
    // The relays run in this test process: status shows its pid and host, not the PostgreSQL backend's pid.
    assert.equal(i.relayPid, process.pid);
    assert.equal(i.host, hostname().slice(0, i.host?.length ?? 0));
  }
  assert.deepEqual(s.unownedLanesWithBacklog, []);
  assert.ok(s.lanes.every((l) => l.owner !== null));
  const human = await ferry(args(), { FERRY_SCHEMA: db.schema });
  assert.match(human.out, /relay instances alive: 2/);
  for (const r of relays) assert.ok(human.out.includes(r.instanceId));
  assert.ok(human.out.includes(`pid ${process.pid} on ${hostname()}`), human.out);
});

test('ferry status - a lane whose owner let its lease term pass shows as overdue, with its owner, epoch and lease age', async () => {
  for (const r of relays.splice(0)) await r.stop();
  const s = quoteIdentifier(db.schema);
  await publishEvents(db.pool, db.schema, stream.prefix, 20, { keys: 20, keyPrefix: 'od' });
  const { rows } = await db.pool.query<{ lane: number }>(
    `SELECT lane FROM ${s}.outbox_events WHERE published_at IS NULL AND dead_at IS NULL LIMIT 1`,
  );
  const lane = rows[0]?.lane ?? 0;
  // A frozen owner: renewed 20 s ago, its 10 s term over. Its heartbeat (gone too) reports a protocol the
  // schema's relay floor admits, or the database would not lease it a lane (outbox migration 000013).
  await db.pool.query(
    `INSERT INTO ${s}.relay_instances (instance, application_name, backend_pid, seen_at, expires_at, release, protocol)
       VALUES ('frozen01', 'frozen01', 0, now(), now(), 'test', ${RELAY_PROTOCOL})`,
  );
  await db.pool.query(
    `UPDATE ${s}.relay_leases SET owner = 'frozen01', epoch = 7, renewed_at = now() - interval '20 seconds', expires_at = now() - interval '10 seconds' WHERE lane = $1`,
    [lane],
  );
  const report = (await ferry([...args(), '--json'])).json<StatusReport>();
  const l = report.lanes.find((x) => x.lane === lane);
  assert.equal(l?.owner, 'frozen01');
  assert.equal(l?.overdue, true);
  assert.equal(l?.epoch, '7');
  assert.ok((l?.leaseAgeSeconds ?? 0) >= 20, `lease age ${l?.leaseAgeSeconds}`);
  assert.ok(report.unownedLanesWithBacklog.includes(lane), 'an overdue lane with backlog counts as unowned');
  assert.ok(report.lanes.filter((x) => x.lane !== lane).every((x) => !x.overdue));
  const human = await ferry(args());
  assert.match(human.out, /OVERDUE/);
  assert.match(human.out, /warning: 1 lane overdue: owner frozen01 did not renew within its lease term/);
});

test('ferry status - an unmigrated schema exits 1 with the fix; no database exits 2', async () => {
  const r = await ferry(['status', '--database-url', databaseUrl(), '--schema', uniqueName('nothing')]);
  assert.equal(r.code, 1);
  assert.match(r.err, /run ferry migrate/);
  const none = await ferry(['status', '--schema', db.schema]);
  assert.equal(none.code, 2);
  assert.match(none.err, /FERRY_DATABASE_URL/);
});
