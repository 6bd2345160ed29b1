import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { quoteIdentifier, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createRelay, type Relay } from '@ferry/relay';
import { createTestDatabase, createTestStream, natsUrl, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import { ferry } from './ops-helpers.js';
import { readStream } from './relay-helpers.js';

// ferry dlq retry/discard on a head the relay is backing off from (not dead yet), with a running relay,
// and retry --dry-run asking NATS whether a stream binds each subject.

let db: TestDatabase;
let stream: TestStream;
let relay: Relay;
let s: string;
/** The head the first test discards. */
let discardedHead = '';
const base = () => ['--database-url', db.url, '--schema', db.schema];

before(async () => {
  db = await createTestDatabase({ prefix: 'ops_dlq_failed', lanes: 2 });
  s = quoteIdentifier(db.schema);
  stream = await createTestStream({ prefix: 'dlqf' });
  // A failed head backs off for up to an hour (full jitter): without an operator it would wait.
  relay = createRelay({
    databaseUrl: db.url,
    schema: db.schema,
    nats: { servers: natsUrl() },
    maintenance: false,
    listen: true,
    pollIntervalMs: 200,
    backoffBaseMs: 3_600_000,
    backoffMaxMs: 3_600_000,
    publishTimeoutMs: 2000,
  });
  await relay.start();
});

after(async () => {
  await relay?.stop();
  await stream?.close();
  await db?.close();
});

async function publish(events: Array<{ subject: string; key: string }>): Promise<string[]> {
  const publisher = createPublisher({ schema: db.schema, source: 'dlq-failed-test', notify: true });
  return withTransaction(db.pool, async (tx) =>
    (
      await publisher.publishMany(
        tx,
        events.map((e) => ({ ...e, type: 'OrderPlaced', data: {} })),
      )
    ).map((r) => r.id),
  );
}

/** Waits until the row failed at least once and is backing off (not dead); returns its state. */
async function backingOff(id: string): Promise<{ attempts: number; later: boolean }> {
  return waitFor(
    async () => {
      const { rows } = await db.pool.query<{ attempts: number; later: boolean }>(
        `SELECT attempts, next_attempt_at > now() AS later FROM ${s}.outbox_events
          WHERE id = $1 AND attempts > 0 AND dead_at IS NULL AND published_at IS NULL`,
        [id],
      );
      return rows[0];
    },
    { what: `event ${id} to fail and back off`, timeoutMs: 20_000 },
  );
}

async function keyOnStream(key: string, n: number): Promise<bigint[]> {
  return waitFor(
    async () => {
      const versions = (await readStream(stream.nc, stream.name)).filter((e) => e.key === key).map((e) => e.version);
      return versions.length === n ? versions : undefined;
    },
    { what: `${n} events of key ${key} on the stream`, timeoutMs: 20_000 },
  );
}

test('ferry dlq - discard --key gives up on a head that is backing off, not dead, and the rows behind it flow in order', async () => {
  const [head] = await publish([
    { subject: `${stream.prefix}_nowhere.orders`, key: 'a' },
    { subject: `${stream.prefix}.orders`, key: 'a' },
    { subject: `${stream.prefix}.orders`, key: 'a' },
  ]);
  assert.ok(head);
  discardedHead = head;
  await backingOff(head);
  const before = (await ferry(['dlq', 'show', head, '--json', ...base()])).json<Record<string, unknown>>();
  assert.equal(before.state, 'backing-off', 'dlq show names the state as the console does');
  const dead = await ferry(['dlq', 'list', '--json', ...base()]);
  assert.deepEqual(dead.json(), [], 'not dead: dlq list leaves it out');
  const failed = await ferry(['dlq', 'list', '--failed', '--json', ...base()]);
  const listed = failed.json<Array<Record<string, unknown>>>();
  assert.deepEqual(
    listed.map((r) => [r.id, r.state, r.dead_at, r.waiting]),
    [[head, 'backing-off', null, 2]],
  );
  assert.match(String(listed[0]?.next_attempt_at), /^\d{4}-/);
  assert.match((await ferry(['dlq', 'list', '--failed', ...base()])).out, /attempts=\d+ backing off, next_attempt_at=\S+ waiting=2/);
  const asked = await ferry(['dlq', 'discard', '--key', 'a', ...base()]);
  assert.equal(asked.code, 2, asked.err);
  assert.match(asked.err, /pass --yes to confirm/);
  assert.equal((await backingOff(head)).attempts > 0, true, 'nothing changed without --yes');

  const r = await ferry(['dlq', 'discard', '--key', 'a', '--yes', '--json', ...base()]);
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(r.json(), { discarded: [head], notFailed: [], notDead: [], dryRun: false });
  assert.deepEqual(await keyOnStream('a', 2), [2n, 3n], 'the later versions, in order, and the discarded head not at all');
  const shown = (await ferry(['dlq', 'show', head, '--json', ...base()])).json<Record<string, unknown>>();
  assert.equal(shown.state, 'discarded');
  assert.match(String(shown.lastError), /^discarded by ferry dlq discard at .*: no_responders/);
  const again = await ferry(['dlq', 'discard', head, '--yes', ...base()]);
  assert.equal(again.code, 1);
  assert.match(again.err, /not failed \(unknown, already published or discarded, or never failed\): /);
});

test('ferry dlq - retry --dry-run names a subject no stream binds (exit 1); once bound, retry sends the backing-off head now', async () => {
  const late = `${stream.prefix}_late.orders`;
  const [head, behind] = await publish([
    { subject: late, key: 'b' },
    { subject: `${stream.prefix}.orders`, key: 'b' },
  ]);
  assert.ok(head && behind);
  await backingOff(head);

  const dry = await ferry(['dlq', 'retry', '--key', 'b', '--dry-run', '--json', '--nats-url', natsUrl(), ...base()]);
  assert.equal(dry.code, 1, dry.err);
  const json = dry.json<{
    wouldChange: string[];
    subjects: Array<{ subject: string; events: number; stream: string | null; fix?: string }>;
  }>();
  assert.deepEqual(json.wouldChange, [head]);
  assert.equal(json.subjects.length, 1);
  assert.deepEqual({ ...json.subjects[0], fix: undefined }, { subject: late, events: 1, stream: null, fix: undefined });
  assert.match(json.subjects[0]?.fix ?? '', new RegExp(`ferry streams ensure STREAM=${late}`));
  assert.match(dry.err, /1 event would fail again: no stream binds dlqf\w*_late\.orders; fix that first \(above\), then retry/);
  const human = await ferry(['dlq', 'retry', head, '--dry-run', '--nats-url', natsUrl(), ...base()]);
  assert.equal(human.code, 1);
  assert.match(human.out, new RegExp(`^would retry ${head}$`, 'm'));
  assert.match(human.err, new RegExp(`no stream binds subject ${late} \\(1 event would fail again\\): add it to a stream`));
  const unreachable = await ferry(['dlq', 'retry', head, '--dry-run', '--nats-url', 'nats://127.0.0.1:1', ...base()]);
  assert.equal(unreachable.code, 1);
  assert.match(unreachable.err, /NATS at nats:\/\/127\.0\.0\.1:1 is not reachable .*; or pass --no-check-streams/);
  // --all-dead selects no backing-off head; --all-failed does.
  const dead = await ferry(['dlq', 'retry', '--all-dead', '--dry-run', '--no-check-streams', '--json', ...base()]);
  assert.deepEqual(dead.json<{ wouldChange: string[] }>().wouldChange, []);
  const failed = await ferry(['dlq', 'retry', '--all-failed', '--dry-run', '--no-check-streams', '--json', ...base()]);
  assert.deepEqual(failed.json<{ wouldChange: string[] }>().wouldChange, [head]);

  // The printed fix, with the stream filled in, is the whole of it: no nats CLI.
  const fix = json.subjects[0]?.fix?.match(/ferry (streams ensure \S+)/)?.[1]?.split(' ') ?? [];
  const ensured = await ferry([...fix.slice(0, 2), fix[2]?.replace('STREAM=', `${stream.name}=`) ?? '', '--nats-url', natsUrl()]);
  assert.equal(ensured.code, 0, ensured.err);
  assert.match(ensured.out, new RegExp(`stream ${stream.name} exists: added the subject\\(s\\) it lacked \\(${late}\\)`));
  const bound = await ferry(['dlq', 'retry', '--key', 'b', '--dry-run', '--json', '--nats-url', natsUrl(), ...base()]);
  assert.equal(bound.code, 0, bound.err);
  assert.deepEqual(bound.json<{ subjects: unknown[] }>().subjects, [{ subject: late, events: 1, stream: stream.name }]);

  const state = await backingOff(head);
  assert.ok(state.later, 'the head still waits for its next attempt');
  const r = await ferry(['dlq', 'retry', head, '--yes', '--json', ...base()]);
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(r.json(), { retried: [head], notFailed: [], notDead: [], dryRun: false });
  assert.deepEqual(await keyOnStream('b', 2), [1n, 2n], 'sent at once, before the event behind it');
  const { rows } = await db.pool.query<{ action: string; filter: Record<string, unknown>; rows: number }>(
    `SELECT action, filter, rows FROM ${s}.operator_actions ORDER BY id`,
  );
  // Each names the ids it changed (issue 42); their digest is covered in confirm-selection.test.ts.
  assert.deepEqual(
    rows.map((r) => ({ ...r, filter: { ...r.filter, changed: (r.filter.changed as { ids: string[] }).ids } })),
    [
      { action: 'dlq.discard', filter: { key: 'a', state: 'failed', changed: [discardedHead] }, rows: 1 },
      { action: 'dlq.discard', filter: { ids: [discardedHead], state: 'failed', changed: [] }, rows: 0 },
      { action: 'dlq.retry', filter: { ids: [head], state: 'failed', changed: [head] }, rows: 1 },
    ],
  );
});
