import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { quoteIdentifier } from '@ferry/core';
import { createRelay, type Relay } from '@ferry/relay';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream } from '@ferry/testkit';
import { ferry } from './ops-helpers.js';

interface VerifyReport {
  ok: boolean;
  subject: string;
  stream: string | null;
  eventId: string | null;
  key: string;
  streamSeq: number | null;
  commitToAckMs: number | null;
  commitToConsumeMs: number | null;
  relaysAlive: number;
  relaysBelowFloor: number;
  cleanup: { consumerDeleted: boolean; streamMessageDeleted: boolean; outboxRow: string };
  error: string | null;
}

let db: TestDatabase;
let stream: TestStream;
let relay: Relay | undefined;
before(async () => {
  db = await createTestDatabase({ prefix: 'ops_verify', lanes: 2 });
  stream = await createTestStream({ prefix: 'OPSVF' });
});
after(async () => {
  await relay?.stop();
  await stream.close();
  await db.close();
});

const base = () => [
  'verify',
  '--database-url',
  db.url,
  '--schema',
  db.schema,
  '--nats-url',
  stream.nc.getServer(),
  '--subject',
  `${stream.prefix}.canary`,
];
const outboxRows = async () =>
  (
    await db.pool.query<{ id: string; published: boolean }>(
      `SELECT id::text AS id, published_at IS NOT NULL AS published FROM ${quoteIdentifier(db.schema)}.outbox_events`,
    )
  ).rows;
const consumerCount = async () => (await stream.jsm.streams.info(stream.name)).state.consumer_count;

test('ferry verify - --help says what is cleaned up and what stays', async () => {
  const r = await ferry(['verify', '--help']);
  assert.equal(r.code, 0);
  for (const s of ['--subject', '--timeout', '--keep-in-stream', '--json', 'outbox', 'Exit codes', 'relay must be running'])
    assert.ok(r.out.includes(s), `help mentions ${s}`);
});

test('ferry verify - without a relay: exit 1 after --timeout, says so, removes the unpublished canary and the consumer', async () => {
  const started = Date.now();
  const r = await ferry([...base(), '--timeout', '1500ms', '--json']);
  assert.equal(r.code, 1);
  assert.ok(Date.now() - started >= 1400, 'it waited for the timeout');
  const report = r.json<VerifyReport>();
  assert.equal(report.ok, false);
  assert.equal(report.relaysAlive, 0);
  assert.equal(report.stream, stream.name);
  assert.match(report.error ?? '', /no relay is running for schema .*start ferry relay/);
  assert.deepEqual(report.cleanup, { consumerDeleted: true, streamMessageDeleted: false, outboxRow: 'deleted-unpublished' });
  assert.match(r.err, /no relay is running/);
  assert.deepEqual(await outboxRows(), []);
  assert.equal(await consumerCount(), 0);
});

test('ferry verify - a relay below the relay floor is not counted alive: the failure says to stop it', async () => {
  // A heartbeat of a relay from before the floor (no protocol reported): what an earlier release writes.
  const s = quoteIdentifier(db.schema);
  await db.pool.query(
    `INSERT INTO ${s}.relay_instances (instance, application_name, backend_pid, seen_at, expires_at)
     VALUES ('0ld0ld01', 'ferry-relay:0ld0ld01:lease', 1, now(), now() + interval '10 minutes')`,
  );
  try {
    const r = await ferry([...base(), '--timeout', '1500ms', '--json']);
    assert.equal(r.code, 1);
    const report = r.json<VerifyReport>();
    assert.equal(report.relaysAlive, 0, 'a relay refused every lane is not alive');
    assert.equal(report.relaysBelowFloor, 1);
    assert.match(report.error ?? '', /no relay is running for schema .*1 relay instance below the schema's relay floor .*stop it/);
    assert.deepEqual(await outboxRows(), []);
  } finally {
    await db.pool.query(`DELETE FROM ${s}.relay_instances WHERE instance = '0ld0ld01'`);
  }
});

test('ferry verify - with a relay: the canary goes through, latencies reported, consumer and stream message cleaned up', async () => {
  relay = createRelay({ databaseUrl: db.url, schema: db.schema, nats: { servers: stream.nc.getServer() }, maintenance: false });
  await relay.start();
  const r = await ferry([...base(), '--json']);
  const report = r.json<VerifyReport>();
  assert.equal(r.code, 0, JSON.stringify(report));
  assert.equal(report.ok, true);
  assert.equal(report.relaysAlive, 1);
  assert.match(report.key, /^ferry-canary-[0-9a-f]{12}$/);
  assert.ok(report.streamSeq !== null && report.streamSeq > 0);
  assert.ok(report.commitToAckMs !== null && report.commitToAckMs > 0 && report.commitToAckMs < 10_000, `ack ${report.commitToAckMs}`);
  assert.ok(report.commitToConsumeMs !== null && report.commitToConsumeMs > 0 && report.commitToConsumeMs < 10_000);
  assert.deepEqual(report.cleanup, { consumerDeleted: true, streamMessageDeleted: true, outboxRow: 'kept-published' });
  assert.deepEqual(await outboxRows(), [{ id: report.eventId, published: true }]);
  assert.equal(await consumerCount(), 0);
  assert.equal(await stream.jsm.streams.getMessage(stream.name, { seq: report.streamSeq ?? 0 }), null, 'the canary message is gone');
  const human = await ferry([...base(), '--keep-in-stream']);
  assert.equal(human.code, 0, human.err);
  assert.match(
    human.out,
    /^canary [0-9a-f-]{36} went through stream \S+ \(seq \d+\): commit-to-ack [\d.]+ ms, commit-to-consume [\d.]+ ms$/m,
  );
  assert.match(human.out, /stream message kept; the outbox row stays published/);
  assert.equal((await stream.jsm.streams.info(stream.name)).state.messages, 1);
});

test('ferry verify - a subject no stream covers exits 1 naming the subject; a bad subject exits 2', async () => {
  const r = await ferry([
    'verify',
    '--database-url',
    db.url,
    '--schema',
    db.schema,
    '--nats-url',
    stream.nc.getServer(),
    '--subject',
    'ferry_verify_nowhere.canary',
  ]);
  assert.equal(r.code, 1);
  assert.match(r.err, /no stream covers subject ferry_verify_nowhere\.canary/);
  const bad = await ferry([...base().slice(0, -2), '--subject', 'has space']);
  assert.equal(bad.code, 2);
});
