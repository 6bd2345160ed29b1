import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, test } from 'node:test';
import { withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createTestDatabase, createTestStream, freePort, type TestDatabase, type TestStream, uniqueName } from '@ferry/testkit';
import { AckPolicy } from '@nats-io/jetstream';
import { ferry } from './ops-helpers.js';
import { FERRY_BIN, publishEvents } from './relay-helpers.js';

interface DoctorReport {
  problems: number;
  warnings: number;
  findings: Array<{ check: string; status: 'ok' | 'warning' | 'problem' | 'skipped'; message: string; fix?: string }>;
}

let db: TestDatabase;
let stream: TestStream;
before(async () => {
  db = await createTestDatabase({ prefix: 'ops_doctor', lanes: 2 });
  stream = await createTestStream({ prefix: 'OPSDR', duplicateWindowMs: 120_000 });
  await publishEvents(db.pool, db.schema, stream.prefix, 20, { keys: 5 });
  await stream.jsm.consumers.add(stream.name, { durable_name: 'good', ack_policy: AckPolicy.Explicit, ack_wait: 30e9, max_deliver: -1 });
  await stream.jsm.consumers.add(stream.name, { durable_name: 'bad', ack_policy: AckPolicy.None, ack_wait: 30e9, max_deliver: 3 });
});
after(async () => {
  await stream.close();
  await db.close();
});

const base = () => ['doctor', '--database-url', db.url, '--schema', db.schema, '--nats-url', stream.nc.getServer()];
// A retry span of about 21 s (2 re-sends, each after a 10 s PubAck timeout) fits in the stream's 2-minute duplicate window.
const shortSpan = ['--max-attempts', '3', '--backoff-base-ms', '100', '--backoff-max-ms', '1000'];
const problems = (r: DoctorReport) => r.findings.filter((f) => f.status === 'problem');

test('ferry doctor - --help lists every check and the exit code rule', async () => {
  const r = await ferry(['doctor', '--help']);
  assert.equal(r.code, 0);
  for (const s of [
    'postgres',
    'migrations',
    'subjects',
    'duplicate window',
    'max_payload',
    '--consumer',
    '--stream',
    '1  problems were found',
    '--json',
  ]) {
    assert.ok(r.out.includes(s), `help mentions ${s}`);
  }
});

test('ferry doctor - a healthy setup exits 0; every finding has a check, a status and a message, warnings a fix', async () => {
  const r = await ferry([...base(), ...shortSpan, '--consumer', 'good', '--json']);
  const report = r.json<DoctorReport>();
  assert.deepEqual(problems(report), []);
  assert.equal(r.code, 0, JSON.stringify(report));
  assert.equal(report.problems, 0);
  const checks = new Set(report.findings.filter((f) => f.status === 'ok').map((f) => f.check));
  for (const c of ['postgres', 'migrations', 'nats', 'subjects', `stream ${stream.name}`, 'max_payload', `consumer ${stream.name}/good`]) {
    assert.ok(checks.has(c), `an ok finding for ${c}: ${[...checks].join(', ')}`);
  }
  for (const f of report.findings) {
    assert.equal(typeof f.message, 'string');
    if (f.status === 'warning') assert.ok(f.fix, `warning ${f.check} has a fix`);
  }
  assert.ok(
    report.findings.some((f) => f.check === 'relays' && f.status === 'warning'),
    'no relay running is a warning',
  );
  assert.ok(report.findings.some((f) => f.check === `stream ${stream.name}` && f.status === 'warning' && /replica/.test(f.message)));
});

test('ferry doctor - problems exit 1 (never 2, bad usage) and are counted in the report: short window, uncovered subject, bad consumer, oversized limit and event', async () => {
  const publisher = createPublisher({ schema: db.schema, source: 'doctor-test', maxPayloadBytes: 4 * 1024 * 1024 });
  await withTransaction(db.pool, async (tx) => {
    await publisher.publish(tx, { subject: 'ferry_doctor_nowhere.x', key: 'x', type: 'X', data: {} });
    await publisher.publish(tx, {
      subject: `${stream.prefix}.orders`,
      key: 'big',
      type: 'Big',
      data: new Uint8Array(1_200_000),
      contentType: 'application/octet-stream',
    });
  });
  const r = await ferry([...base(), '--consumer', 'bad', '--max-payload-bytes', String(4 * 1024 * 1024), '--json']);
  const report = r.json<DoctorReport>();
  const found = problems(report);
  assert.equal(r.code, 1, 'five problems exit 1, not 5 (nor 2, which is bad usage)');
  assert.equal(report.problems, found.length);
  assert.equal(found.length, 5, JSON.stringify(found, null, 1));
  const by = (re: RegExp) => found.find((f) => re.test(`${f.check} ${f.message}`));
  // The default span counts a PubAck timeout and a poll interval before each of the 24 re-sends: 22 minutes, not 18.
  assert.match(
    by(/duplicate window 2m is shorter than the relay's retry span 22m/)?.fix ?? '',
    /ferry streams ensure \S+ --duplicate-window 23m/,
  );

  assert.ok(by(/ferry_doctor_nowhere\.x \(1 event\)/)?.fix);
  assert.ok(by(/consumer .*\/bad .*ack_policy "none".*max_deliver 3/));
  assert.ok(by(/maxPayloadBytes 4194304 is above the server's max_payload 1048576/));
  assert.ok(by(/has 12\d{5} bytes of data, over the server's max_payload/)); // measured in SQL, not loaded
  for (const f of found) assert.ok(f.fix, `${f.check} has a fix`);
  // The process exit code, through bin/ferry.js, is 1 too; the count is in the report.
  const proc = spawnSync(process.execPath, [FERRY_BIN, ...base(), '--consumer', 'bad', '--json'], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(proc.status, 1, proc.stderr);
  assert.equal((JSON.parse(proc.stdout) as DoctorReport).problems, 4);
  const human = await ferry([...base(), '--consumer', 'bad']);
  assert.equal(human.code, 1, 'four problems: still 1');
  assert.match(human.out, /^PROBLEM {2}subjects: /m);
  assert.match(human.out, /^ {9}fix: /m);
  assert.match(human.out, /4 problems, \d+ warnings?$/);
});

test('ferry doctor - a duplicate window shorter than the lease term plus the publish timeout is a problem: a takeover re-send would be stored twice', async () => {
  // The stream keeps 2 minutes; a 5-minute term plus the 10 s publish timeout is longer.
  const r = await ferry([...base(), '--lease-term-ms', '300000', '--json']);
  const found = problems(r.json<DoctorReport>());
  const takeover = found.find((f) => /shorter than the lease term plus the publish timeout, 5m/.test(f.message));
  assert.ok(takeover, JSON.stringify(found, null, 1));
  assert.match(takeover.message, /--lease-term-ms 300000/);
  assert.match(takeover.fix ?? '', /ferry streams ensure \S+ --duplicate-window 6m/);
  const fine = await ferry([...base(), '--json']);
  assert.ok(
    !problems(fine.json<DoctorReport>()).some((f) => /lease term plus the publish timeout/.test(f.message)),
    'the default term fits in the 2-minute window',
  );
});

test('ferry doctor - unreachable NATS, an unmigrated schema and a missing stream or consumer are problems, never a crash', async () => {
  const port = await freePort();
  const r = await ferry([
    'doctor',
    '--database-url',
    db.url,
    '--schema',
    uniqueName('nothing'),
    '--nats-url',
    `nats://127.0.0.1:${port}`,
    '--json',
  ]);
  const report = r.json<DoctorReport>();
  assert.equal(r.code, 1, 'two problems exit 1: before issue 29 they exited 2, which reads as bad usage');
  assert.deepEqual(
    problems(report).map((f) => f.check),
    ['migrations', 'nats'],
  );
  assert.match(problems(report)[0]?.fix ?? '', /ferry migrate --schema/);
  const missing = await ferry([...base(), ...shortSpan, '--stream', 'FERRY_NO_SUCH_STREAM', '--json']);
  const m = missing.json<DoctorReport>();
  assert.ok(problems(m).some((f) => f.check === 'stream FERRY_NO_SUCH_STREAM'));
  const noConsumer = await ferry([...base(), ...shortSpan, '--consumer', 'nobody', '--json']);
  assert.ok(
    problems(noConsumer.json<DoctorReport>()).some((f) => f.check === `consumer ${stream.name}/nobody` && /not found/.test(f.message)),
  );
});
