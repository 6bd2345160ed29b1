import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { migrate, quoteIdentifier, withTransaction } from '@ferry/core';
import { createInbox, type InboxReport } from '@ferry/inbox';
import { createPublisher } from '@ferry/publisher';
import { createRelay } from '@ferry/relay';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import { markPublished } from './delivery-state.js';
import { ferry } from './ops-helpers.js';
import { countPending, publishEvents } from './relay-helpers.js';

interface ReplayReport {
  matched: number;
  replayed: number;
  firstSeq: string | null;
  lastSeq: string | null;
  msgIdSuffix: string;
  durationMs: number;
  dryRun: boolean;
  failed: { seq: string; id: string; error: string } | null;
}

interface Stored {
  streamSeq: number;
  msgId: string;
  id: string;
  key: string;
  version: bigint;
  subject: string;
}

let db: TestDatabase;
let stream: TestStream;
let ids: string[] = [];
let paymentIds: string[] = [];

async function storedAfter(fromStreamSeq: number): Promise<Stored[]> {
  const last = (await stream.jsm.streams.info(stream.name)).state.last_seq;
  const out: Stored[] = [];
  for (let seq = fromStreamSeq + 1; seq <= last; seq++) {
    const m = await stream.jsm.streams.getMessage(stream.name, { seq });
    if (!m) continue;
    out.push({
      streamSeq: m.seq,
      msgId: m.header.get('Nats-Msg-Id'),
      id: m.header.get('ce-id'),
      key: m.header.get('ce-partitionkey'),
      version: BigInt(m.header.get('ce-sequence')),
      subject: m.subject,
    });
  }
  return out;
}

async function seqsOf(eventIds: string[]): Promise<string[]> {
  const { rows } = await db.pool.query<{ seq: string }>(
    `SELECT seq::text AS seq FROM ${quoteIdentifier(db.schema)}.outbox o WHERE id = ANY ($1::uuid[]) ORDER BY o.seq`,
    [eventIds],
  );
  return rows.map((r) => r.seq);
}

async function lastAction(): Promise<{ action: string; via: string; rows: number; outcome: string; filter: Record<string, unknown> }> {
  const { rows } = await db.pool.query(
    `SELECT action, via, rows, outcome, filter FROM ${quoteIdentifier(db.schema)}.operator_actions ORDER BY id DESC LIMIT 1`,
  );
  assert.ok(rows[0], 'an operator_actions row');
  return rows[0];
}

const lastSeq = async () => (await stream.jsm.streams.info(stream.name)).state.last_seq;
const base = () => ['replay', '--database-url', db.url, '--schema', db.schema, '--nats-url', stream.nc.getServer(), '--yes'];

before(async () => {
  db = await createTestDatabase({ prefix: 'ops_replay', lanes: 4, max: 20 });
  stream = await createTestStream({ prefix: 'OPSRP', duplicateWindowMs: 600_000 });
  ids = await publishEvents(db.pool, db.schema, stream.prefix, 200, { keys: 20 });
  const publisher = createPublisher({ schema: db.schema, source: 'replay-test' });
  paymentIds = await withTransaction(db.pool, async (tx) => {
    const out: string[] = [];
    for (let i = 0; i < 10; i++) {
      out.push((await publisher.publish(tx, { subject: `${stream.prefix}.payments`, key: 'pay-1', type: 'PaymentTaken', data: { i } })).id);
    }
    return out;
  });
  const relay = createRelay({ databaseUrl: db.url, schema: db.schema, nats: { servers: stream.nc.getServer() }, maintenance: false });
  await relay.start();
  await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 20_000, what: 'the outbox to drain' });
  await relay.stop();
  assert.equal(await lastSeq(), 210);
});
after(async () => {
  await stream.close();
  await db.pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(`${db.schema}_boss`)} CASCADE`);
  await db.close();
});

test('ferry replay - --help describes the filters, the message id and the exit codes', async () => {
  const r = await ferry(['replay', '--help']);
  assert.equal(r.code, 0);
  for (const s of [
    '--from-seq',
    '--to-seq',
    '--since',
    '--until',
    '--key',
    '--subject-prefix',
    '--json',
    '--dry-run',
    'Nats-Msg-Id',
    'Exit codes',
  ]) {
    assert.ok(r.out.includes(s), `help mentions ${s}`);
  }
});

test('ferry replay - a seq range is stored again inside the duplicate window, ce-id kept, a distinct Nats-Msg-Id, in seq order', async () => {
  const seqs = await seqsOf(ids);
  const from = seqs[50] as string;
  const to = seqs[149] as string;
  const before = await lastSeq();
  const r = await ferry([...base(), '--from-seq', from, '--to-seq', to, '--json', '--progress', 'lines', '--max-in-flight', '16']);
  assert.equal(r.code, 0, r.err);
  const report = r.json<ReplayReport>();
  assert.equal(report.matched, 100);
  assert.equal(report.replayed, 100);
  assert.equal(report.firstSeq, from);
  assert.equal(report.lastSeq, to);
  assert.equal(report.failed, null);
  assert.match(report.msgIdSuffix, /^:replay:\d{4}-/);
  assert.match(r.err, /replay: 100\/100 \(100%\)/);
  const copies = await storedAfter(before);
  assert.equal(copies.length, 100);
  assert.deepEqual(
    copies.map((c) => c.id),
    ids.slice(50, 150),
    'the copies carry the original event ids, in seq order',
  );
  for (const c of copies) assert.equal(c.msgId, `${c.id}${report.msgIdSuffix}`);
  // A second replay of the same range is not dropped as a duplicate either.
  const again = await ferry([...base(), '--from-seq', from, '--to-seq', to, '--json', '--progress', 'none']);
  assert.equal(again.code, 0, again.err);
  assert.equal(again.json<ReplayReport>().replayed, 100);
  assert.equal(await lastSeq(), before + 200);
});

test('ferry replay - --key with --subject-prefix selects one key, versions ascending; human output', async () => {
  const before = await lastSeq();
  const r = await ferry([...base(), '--key', 'pay-1', '--subject-prefix', `${stream.prefix}.pay`, '--progress', 'none']);
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /^replayed 10 of 10 events \(seq \d+\.\.\d+\) in .* s \(\d+\/s\); Nats-Msg-Id <event id>:replay:/);
  const copies = await storedAfter(before);
  assert.deepEqual(
    copies.map((c) => c.id),
    paymentIds,
  );
  assert.deepEqual(
    copies.map((c) => c.version),
    Array.from({ length: 10 }, (_, i) => BigInt(i + 1)),
  );
  const none = await ferry([...base(), '--key', 'k3', '--subject-prefix', `${stream.prefix}.pay`, '--json']);
  assert.equal(none.json<ReplayReport>().matched, 0);
  // The run is in the audit trail, as the console's replays are (one shared action).
  const audit = await lastAction();
  assert.equal(audit.action, 'replay');
  assert.equal(audit.via, 'cli');
  assert.equal(audit.rows, 10);
  assert.equal(audit.outcome, 'ok');
  assert.equal(audit.filter.key, 'pay-1');
  assert.equal(audit.filter.subjectPrefix, `${stream.prefix}.pay`);
  // And on record before the first copy went out: a run killed midway is not missing from the trail.
  const { rows: started } = await db.pool.query<{ rows: number; outcome: string; filter: Record<string, unknown> }>(
    `SELECT rows, outcome, filter FROM ${quoteIdentifier(db.schema)}.operator_actions ORDER BY id DESC OFFSET 1 LIMIT 1`,
  );
  assert.equal(started[0]?.rows, 0);
  assert.match(started[0]?.outcome ?? '', /^started: 10 copies to send/);
  assert.equal(started[0]?.filter.msgIdSuffix, audit.filter.msgIdSuffix, 'the same run');
});

test('ferry replay - --since/--until with --dry-run counts and publishes nothing', async () => {
  const before = await lastSeq();
  const r = await ferry([
    ...base(),
    '--since',
    '2000-01-01T00:00:00Z',
    '--until',
    new Date(Date.now() + 60_000).toISOString(),
    '--dry-run',
    '--json',
  ]);
  assert.equal(r.code, 0, r.err);
  const report = r.json<ReplayReport>();
  assert.equal(report.matched, 210);
  assert.equal(report.replayed, 0);
  assert.equal(report.dryRun, true);
  assert.equal(await lastSeq(), before);
  const human = await ferry([...base(), '--until', '2000-01-01T00:00:00Z', '--dry-run']);
  assert.match(human.out, /would replay 0 events/);
});

test('ferry replay - no filter, reversed ranges and bad values exit 2 and publish nothing', async () => {
  const before = await lastSeq();
  for (const args of [
    [],
    ['--from-seq', '9', '--to-seq', '3'],
    ['--from-seq', 'x'],
    ['--since', 'yesterday'],
    ['--since', '2026-01-02', '--until', '2026-01-01'],
  ]) {
    const r = await ferry([...base(), ...args]);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.err}`);
    assert.ok(r.err.length > 0);
  }
  assert.equal(await lastSeq(), before);
});

test('ferry replay - an event no stream covers stops the replay with exit 1 and the seq to resume from', async () => {
  const publisher = createPublisher({ schema: db.schema, source: 'replay-test' });
  const id = await withTransaction(
    db.pool,
    async (tx) => (await publisher.publish(tx, { subject: 'ferry_nostream.x', key: 'lost', type: 'X', data: {} })).id,
  );
  assert.equal(await markPublished(db.pool, db.schema, 'o.id = $1', [id]), 1);
  const [seq] = await seqsOf([id]);
  const r = await ferry([...base(), '--subject-prefix', 'ferry_nostream.', '--json', '--progress', 'none', '--publish-timeout-ms', '2000']);
  assert.equal(r.code, 1);
  const report = r.json<ReplayReport>();
  assert.equal(report.replayed, 0);
  assert.equal(report.failed?.seq, seq);
  assert.match(r.err, new RegExp(`ferry replay --subject-prefix ferry_nostream. --from-seq ${seq} --to-seq ${seq}`));
  const audit = await lastAction();
  assert.equal(audit.action, 'replay');
  assert.equal(audit.rows, 0);
  assert.match(audit.outcome, /1 publish\(es\) failed/);
});

test('ferry replay - an inbox that already applied the events drops the replayed copies (duplicate or stale)', async () => {
  const s = quoteIdentifier(db.schema);
  await migrate({ pool: db.pool, schema: db.schema, set: 'inbox' });
  await db.pool.query(`CREATE TABLE ${s}.payments (key text NOT NULL, version bigint NOT NULL, PRIMARY KEY (key, version))`);
  const reports: InboxReport[] = [];
  const inbox = createInbox<{ PaymentTaken: { i: number } }>({
    pool: db.pool,
    nc: stream.nc,
    stream: stream.name,
    consumer: 'ops_replay',
    schema: db.schema,
    bossSchema: `${db.schema}_boss`,
    filterSubjects: [`${stream.prefix}.payments`],
    mode: 'latest',
    handlers: {
      PaymentTaken: async (event, { tx }) => {
        await tx.query(`INSERT INTO ${s}.payments (key, version) VALUES ($1, $2)`, [event.key, event.version.toString()]);
      },
    },
    onEvent: (r) => reports.push(r),
  });
  await inbox.start();
  try {
    const count = (kind: string) => reports.filter((r) => r.kind === kind).length;
    // The stream holds pay-1's 10 events and the 10 copies an earlier test replayed.
    // In latest mode a copy of the newest version is a duplicate, a copy of an older one stale.
    const dropped = () => count('duplicate') + count('stale');
    await waitFor(async () => count('applied') + dropped() === 20, { timeoutMs: 20_000, what: 'the stream consumed' });
    assert.equal(count('applied'), 10);
    assert.equal(dropped(), 10, 'the earlier copies were dropped');
    const r = await ferry([...base(), '--key', 'pay-1', '--json', '--progress', 'none']);
    assert.equal(r.json<ReplayReport>().replayed, 10);
    await waitFor(async () => dropped() === 20, { timeoutMs: 20_000, what: 'the replayed copies dropped' });
    assert.equal(count('applied'), 10, 'nothing applied twice');
    const { rows } = await db.pool.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${s}.payments`);
    assert.equal(rows[0]?.n, '10');
  } finally {
    await inbox.stop();
  }
});
