import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { encodedSize, encodeEvent, eventFromOutboxRow, isValidationError, quoteIdentifier, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import { markPublished } from './delivery-state.js';
import { ferry } from './ops-helpers.js';

// ferry replay when something goes wrong mid-run: a failed copy stops its key before the
// key's later copies are sent, the resume commands send exactly what was not sent, the
// largest event the publisher accepts can be replayed, and rows pruned mid-run are reported.

interface ReplayReport {
  matched: number;
  replayed: number;
  lastSeq: string | null;
  msgIdSuffix: string;
  failed: { seq: string; id: string; key: string; error: string } | null;
  failures: Array<{ seq: string; id: string; key: string; error: string }>;
  skipped: number;
  vanished: number;
  resume: string[][];
}

interface Copy {
  id: string;
  key: string;
  version: bigint;
}

let db: TestDatabase;
let stream: TestStream;
const NOSTREAM = 'ferry_nostream_edges.x';

const lastSeq = async () => (await stream.jsm.streams.info(stream.name)).state.last_seq;
const base = () => [
  'replay',
  '--database-url',
  db.url,
  '--schema',
  db.schema,
  '--nats-url',
  stream.nc.getServer(),
  '--progress',
  'none',
  '--yes',
];

async function copiesAfter(fromStreamSeq: number): Promise<Copy[]> {
  const last = await lastSeq();
  const out: Copy[] = [];
  for (let seq = fromStreamSeq + 1; seq <= last; seq++) {
    const m = await stream.jsm.streams.getMessage(stream.name, { seq });
    if (!m) continue;
    out.push({ id: m.header.get('ce-id'), key: m.header.get('ce-partitionkey'), version: BigInt(m.header.get('ce-sequence')) });
  }
  return out;
}

/** Commits one event per entry (key, subject) in order, marks them published as the relay would; returns id and seq per entry. */
async function published(entries: Array<{ key: string; subject: string; data?: unknown }>): Promise<Array<{ id: string; seq: string }>> {
  const publisher = createPublisher({ schema: db.schema, source: 'replay-edges' });
  const out = await withTransaction(db.pool, async (tx) => {
    const r: Array<{ id: string; seq: string }> = [];
    for (const e of entries) {
      const p = await publisher.publish(tx, { subject: e.subject, key: e.key, type: 'T', data: e.data ?? {} });
      r.push({ id: p.id, seq: p.seq.toString() });
    }
    return r;
  });
  assert.equal(await markPublished(db.pool, db.schema, 'o.id = ANY ($1::uuid[])', [out.map((o) => o.id)]), out.length);
  return out;
}

before(async () => {
  db = await createTestDatabase({ prefix: 'ops_replay_edges', lanes: 4, max: 6 });
  stream = await createTestStream({ prefix: 'OPSRPE', duplicateWindowMs: 600_000 });
});
after(async () => {
  await stream.close();
  await db.close();
});

test('ferry replay - a copy over max_payload stops its key before v3 and v4 are sent; the resume command is exact', async () => {
  const max = stream.nc.info?.max_payload as number;
  const rows = await published([1, 2, 3, 4].map(() => ({ key: 'mix', subject: `${stream.prefix}.mix` })));
  // v2 exactly at max_payload in the relay's form (Nats-Msg-Id = event id), as an older
  // publisher let through; its replay copy is 32 bytes longer.
  const s = quoteIdentifier(db.schema);
  await db.pool.query(`UPDATE ${s}.outbox SET data = convert_to('"' || repeat('x', $2::int) || '"', 'UTF8') WHERE id = $1`, [
    rows[1]?.id,
    10,
  ]);
  const { rows: raw } = await db.pool.query(
    `SELECT id::text AS id, key, version::text AS version, subject, type, source, content_type, data, headers, occurred_at FROM ${s}.outbox WHERE id = $1`,
    [rows[1]?.id],
  );
  const small = encodedSize(encodeEvent(eventFromOutboxRow(raw[0])));
  await db.pool.query(`UPDATE ${s}.outbox SET data = convert_to('"' || repeat('x', $2::int) || '"', 'UTF8') WHERE id = $1`, [
    rows[1]?.id,
    10 + (max - small),
  ]);
  const before = await lastSeq();
  const r = await ferry([...base(), '--key', 'mix', '--json', '--max-in-flight', '64']);
  assert.equal(r.code, 1, r.err);
  const report = r.json<ReplayReport>();
  assert.equal(report.failed?.seq, rows[1]?.seq);
  assert.match(report.failed?.error ?? '', /max_payload/);
  assert.equal(report.replayed, 1);
  assert.equal(report.skipped, 2);
  assert.deepEqual(
    (await copiesAfter(before)).map((c) => c.version),
    [1n],
    'v3 and v4 did not reach the stream',
  );
  assert.deepEqual(report.resume, [['--key', 'mix', '--from-seq', rows[1]?.seq, '--to-seq', rows[3]?.seq]]);
  assert.match(r.err, new RegExp(`ferry replay --key mix --from-seq ${rows[1]?.seq} --to-seq ${rows[3]?.seq}`));
});

test('ferry replay - a copy the server rejects stops its key and the run; running the resume commands sends each event exactly once', async () => {
  // a and b interleave; a's v2 has a subject no stream covers (rejected asynchronously, after b's rows went out).
  const entries = [];
  for (let v = 1; v <= 5; v++) {
    entries.push({ key: 'ra', subject: v === 2 ? NOSTREAM : `${stream.prefix}.r` });
    entries.push({ key: 'rb', subject: `${stream.prefix}.r` });
  }
  const rows = await published(entries);
  const before = await lastSeq();
  const args = ['--from-seq', rows[0]?.seq as string, '--to-seq', rows.at(-1)?.seq as string];
  const r = await ferry([...base(), ...args, '--json', '--max-in-flight', '64', '--publish-timeout-ms', '2000']);
  assert.equal(r.code, 1, r.err);
  const report = r.json<ReplayReport>();
  assert.equal(report.failed?.key, 'ra');
  assert.equal(report.failed?.seq, rows[2]?.seq);
  const first = await copiesAfter(before);
  assert.deepEqual(
    first.filter((c) => c.key === 'ra').map((c) => c.version),
    [1n],
    "ra's later events were not sent",
  );
  assert.equal(report.replayed, first.length);
  assert.ok(report.resume.length >= 1);
  // Fix the cause, then run exactly the printed commands.
  await db.pool.query(`UPDATE ${quoteIdentifier(db.schema)}.outbox SET subject = $2 WHERE id = $1`, [rows[2]?.id, `${stream.prefix}.r`]);
  for (const resume of report.resume) {
    const again = await ferry([...base(), ...resume, '--json']);
    assert.equal(again.code, 0, again.err);
  }
  const all = await copiesAfter(before);
  assert.deepEqual(all.map((c) => c.id).sort(), rows.map((x) => x.id).sort(), 'every event replayed exactly once');
  for (const key of ['ra', 'rb']) {
    assert.deepEqual(
      all.filter((c) => c.key === key).map((c) => c.version),
      [1n, 2n, 3n, 4n, 5n],
      `${key} in order`,
    );
  }
});

test('ferry replay - --keep-going goes on with the other keys and resumes only the failed key', async () => {
  const entries = [];
  for (let v = 1; v <= 4; v++) {
    entries.push({ key: 'ka', subject: v === 2 ? NOSTREAM : `${stream.prefix}.k` });
    entries.push({ key: 'kb', subject: `${stream.prefix}.k` });
  }
  const rows = await published(entries);
  const before = await lastSeq();
  const args = ['--from-seq', rows[0]?.seq as string, '--to-seq', rows.at(-1)?.seq as string];
  const r = await ferry([...base(), ...args, '--json', '--keep-going', '--publish-timeout-ms', '2000']);
  assert.equal(r.code, 1, r.err);
  const report = r.json<ReplayReport>();
  const copies = await copiesAfter(before);
  assert.deepEqual(
    copies.filter((c) => c.key === 'kb').map((c) => c.version),
    [1n, 2n, 3n, 4n],
  );
  assert.deepEqual(
    copies.filter((c) => c.key === 'ka').map((c) => c.version),
    [1n],
  );
  assert.equal(report.skipped, 2);
  assert.deepEqual(report.resume, [['--key', 'ka', '--from-seq', rows[2]?.seq, '--to-seq', rows.at(-1)?.seq]]);
});

test('ferry replay - the largest event the publisher accepts can be replayed (the size check counts the replay message id)', async () => {
  const max = stream.nc.info?.max_payload as number;
  const publisher = createPublisher({ schema: db.schema, source: 'replay-edges', maxPayloadBytes: max });
  const event = (n: number) => ({ subject: `${stream.prefix}.big`, key: 'big', type: 'T', data: 'x'.repeat(n) });
  // Find the largest payload the publisher accepts from the size its error reports.
  let n = max;
  for (let i = 0; i < 3; i++) {
    try {
      await withTransaction(db.pool, async (tx) => {
        await publisher.publish(tx, event(n));
        throw new Error('rollback');
      });
    } catch (err) {
      if (!isValidationError(err)) break;
      const size = Number(/encodes to (\d+) bytes/.exec(err.message)?.[1]);
      n -= size - max;
    }
  }
  await assert.rejects(
    withTransaction(db.pool, (tx) => publisher.publish(tx, event(n + 1))),
    isValidationError,
  );
  const id = await withTransaction(db.pool, async (tx) => (await publisher.publish(tx, event(n))).id);
  assert.equal(await markPublished(db.pool, db.schema, 'o.id = $1', [id]), 1);
  const before = await lastSeq();
  const r = await ferry([...base(), '--key', 'big', '--json']);
  assert.equal(r.code, 0, r.err);
  assert.equal(r.json<ReplayReport>().replayed, 1);
  assert.deepEqual(
    (await copiesAfter(before)).map((c) => c.id),
    [id],
  );
});

test('ferry replay - rows pruned during the run are counted as vanished and the exit code says incomplete', async () => {
  const s = quoteIdentifier(db.schema);
  const entries = Array.from({ length: 1500 }, (_, i) => ({ key: `p${i % 30}`, subject: `${stream.prefix}.prune` }));
  const rows = await published(entries);
  const doomed = rows.slice(1000).map((r) => r.id);
  // The prune commits while the replay is on its first pages: its count saw 1500 rows.
  const pruner = await db.pool.connect();
  try {
    await pruner.query('BEGIN');
    await pruner.query(`DELETE FROM ${s}.outbox WHERE id = ANY ($1::uuid[])`, [doomed]);
    const before = await lastSeq();
    const run = ferry([...base(), '--subject-prefix', `${stream.prefix}.prune`, '--json', '--max-in-flight', '1']);
    await waitFor(async () => (await lastSeq()) > before, { timeoutMs: 20_000, what: 'the replay to start sending', intervalMs: 2 });
    await pruner.query('COMMIT');
    const r = await run;
    assert.equal(r.code, 1, r.err);
    const report = r.json<ReplayReport>();
    assert.equal(report.matched, 1500);
    assert.equal(report.replayed, 1000);
    assert.equal(report.vanished, 500);
    assert.equal(report.failed, null);
    assert.match(r.err, /500 selected events vanished/);
  } finally {
    pruner.release();
  }
});

test('ferry replay - an empty --subject-prefix is refused, and without --yes and a terminal nothing is sent', async () => {
  await published([{ key: 'ask', subject: `${stream.prefix}.ask` }]);
  const before = await lastSeq();
  const all = ['replay', '--database-url', db.url, '--schema', db.schema, '--nats-url', stream.nc.getServer()];
  const empty = await ferry([...all, '--subject-prefix', '', '--yes']);
  assert.equal(empty.code, 2, empty.err);
  assert.match(empty.err, /empty --subject-prefix selects every subject/);
  const unconfirmed = await ferry([...all, '--key', 'ask']);
  assert.equal(unconfirmed.code, 2, unconfirmed.err);
  assert.match(unconfirmed.err, /replay 1 events .* pass --yes to confirm/);
  assert.equal(await lastSeq(), before, 'nothing sent');
  const help = await ferry(['replay', '--help']);
  assert.match(help.out, /--yes/);
});

test('ferry replay - --since/--until without a zone are refused (not read in the host time zone); with Z or an offset they select', async () => {
  const before = await lastSeq();
  for (const bad of ['2026-11-29T08:00:00', '2026-11-29 08:00', '2026-11-29']) {
    const r = await ferry([...base(), '--since', bad, '--dry-run']);
    assert.equal(r.code, 2, `${bad}: ${r.err}`);
    assert.match(r.err, /with a zone/);
    assert.match(r.err, /10m, 2h, 1d/, 'the refusal names the relative form too');
  }
  const hourAgo = new Date(Date.now() - 3_600_000);
  const offset = `${hourAgo.toISOString().slice(0, 19)}+00:00`;
  const zoned = await ferry([...base(), '--since', offset, '--until', new Date(Date.now() + 60_000).toISOString(), '--dry-run', '--json']);
  assert.equal(zoned.code, 0, zoned.err);
  assert.ok(zoned.json<ReplayReport>().matched > 0);
  assert.equal(await lastSeq(), before);
  const help = await ferry(['replay', '--help']);
  assert.match(help.out, /with its zone/);
  // Issue 29: relative times, a duration back from now (before: refused, ISO times only).
  const relative = await ferry([...base(), '--since', '2h', '--dry-run', '--json']);
  assert.equal(relative.code, 0, relative.err);
  assert.equal(
    relative.json<ReplayReport>().matched,
    zoned.json<ReplayReport>().matched,
    '--since 2h selects what the hour-ago ISO time did',
  );
  const none = await ferry([...base(), '--since', '2h', '--until', '1d', '--dry-run']);
  assert.equal(none.code, 2, 'an --until before --since is refused');
  const future = await ferry([...base(), '--until', '1d', '--dry-run', '--json']);
  assert.equal(future.code, 0, future.err);
  assert.equal(future.json<ReplayReport>().matched, 0, 'nothing was inserted over a day ago');
  assert.match(help.out, /10m, 2h, 1d/);
});
