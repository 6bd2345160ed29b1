import assert from 'node:assert/strict';
import { after, afterEach, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { quoteIdentifier } from '@ferry/core';
import { type Handler, isConsumerMismatchError, isValidationError, migrateInbox, pruneInboxMessages, pruneQueueName } from '@ferry/inbox';
import { createTestStream, waitFor } from '@ferry/testkit';
import { AckPolicy } from '@nats-io/jetstream';
import { PgBoss } from 'pg-boss';
import { countReports, EFFECT_SQL, ferryEvent, type InboxFixture, inboxFixture, publishEvents } from './inbox-support.js';

const fixtures: InboxFixture[] = [];
// Each test's pools and streams go when it ends: the shared PostgreSQL has a connection limit.
async function release(): Promise<void> {
  for (const f of fixtures.splice(0)) await f.close();
}
afterEach(release);
after(release);

async function fixture(): Promise<InboxFixture> {
  const f = await inboxFixture();
  fixtures.push(f);
  return f;
}

/** A handler that writes one effects row and the latest state. */
function effectHandler(f: InboxFixture, table = 'state'): Handler {
  const sql = EFFECT_SQL(f.s);
  return async (event, { tx }) => {
    if (table === 'state') await tx.query(sql.effect, [event.key, event.version.toString()]);
    await tx.query(sql.state.replace(`${f.s}.state`, `${f.s}.${table}`), [event.key, event.version.toString()]);
  };
}

describe('inbox gate', () => {
  test('inbox - latest mode applies only versions newer than the recorded one', async () => {
    const f = await fixture();
    const inbox = f.inbox({ mode: 'latest', handlers: { Set: effectHandler(f) } });
    await inbox.start();
    const p = f.stream.prefix;
    const events = [
      ferryEvent(p, { key: 'a', version: 1 }),
      ferryEvent(p, { key: 'a', version: 3 }),
      ferryEvent(p, { key: 'a', version: 2 }),
      ferryEvent(p, { key: 'b', version: 1 }),
    ];
    await publishEvents(f.stream.nc, events);
    await waitFor(() => inbox.counts().applied + inbox.counts().stale === 4, { what: 'four messages settled' });
    assert.deepEqual(await f.effects(), [
      { key: 'a', version: '1' },
      { key: 'a', version: '3' },
      { key: 'b', version: '1' },
    ]);
    assert.equal(inbox.counts().stale, 1);
    const stale = f.reports.find((r) => r.kind === 'stale');
    assert.ok(stale && stale.kind === 'stale' && stale.version === 2n && stale.recorded === 3n);
    // The same events again, as a redelivery or a re-send with new message ids: nothing changes.
    await publishEvents(f.stream.nc, events, { msgIdSuffix: 'again' });
    await waitFor(() => inbox.counts().stale === 3 && inbox.counts().duplicate === 2, { what: 'the copies settled as stale or duplicate' });
    assert.equal((await f.effects()).length, 3);
    assert.equal(inbox.counts().applied, 3);
  });

  test('inbox - keys with quotes, backslashes and non-ASCII are gated and stored exactly', async () => {
    const f = await fixture();
    const inbox = f.inbox({ mode: 'latest', handlers: { Set: effectHandler(f) } });
    await inbox.start();
    const keys = ["o'brien", 'back\\slash\\', "'; DROP TABLE effects; --", 'ключ-€-🔑'];
    const p = f.stream.prefix;
    await publishEvents(
      f.stream.nc,
      keys.flatMap((key) => [ferryEvent(p, { key, version: 2 }), ferryEvent(p, { key, version: 1 })]),
    );
    await waitFor(() => inbox.counts().applied + inbox.counts().stale === 8, { what: 'eight settled' });
    assert.equal(inbox.counts().stale, 4);
    const { rows } = await f.db.pool.query<{ key: string; version: string }>(
      `SELECT key, version::text FROM ${f.s}.inbox_versions WHERE consumer = 'billing'`,
    );
    assert.deepEqual(
      rows.map((r) => [r.key, r.version]).sort(),
      [...keys].sort().map((k) => [k, '2']),
    );
  });

  test('inbox - sequential mode applies only recorded + 1 and waits for a gap to fill', async () => {
    const f = await fixture();
    const inbox = f.inbox({ mode: 'sequential', gapRetryMs: 50, handlers: { Set: effectHandler(f) } });
    await inbox.start();
    const p = f.stream.prefix;
    await publishEvents(f.stream.nc, [ferryEvent(p, { key: 'a', version: 1 }), ferryEvent(p, { key: 'a', version: 3 })]);
    await waitFor(() => inbox.counts().gap === 1, { what: 'version 3 stored to wait while version 2 is missing' });
    const { rows: waiting } = await f.db.pool.query(`SELECT key, version::text FROM ${f.s}.inbox_early`);
    assert.deepEqual(waiting, [{ key: 'a', version: '3' }]);
    assert.deepEqual(await f.effects(), [{ key: 'a', version: '1' }]);
    await publishEvents(f.stream.nc, [ferryEvent(p, { key: 'a', version: 2 })]);
    await waitFor(() => inbox.counts().applied === 3, { what: 'the gap filled' });
    const { rows } = await f.db.pool.query<{ version: string }>(`SELECT version::text FROM ${f.s}.effects ORDER BY applied_at`);
    assert.deepEqual(
      rows.map((r) => r.version),
      ['1', '2', '3'],
    );
  });

  test('inbox - sequential mode parks an early version once the gap timeout has passed', async () => {
    const f = await fixture();
    const inbox = f.inbox({ mode: 'sequential', gapRetryMs: 50, gapTimeoutMs: 300, handlers: { Set: effectHandler(f) } });
    await inbox.start();
    const p = f.stream.prefix;
    await publishEvents(f.stream.nc, [ferryEvent(p, { key: 'a', version: 1 }), ferryEvent(p, { key: 'a', version: 3 })]);
    await waitFor(() => inbox.counts().parked === 1, { what: 'version 3 parked' });
    const parked = f.reports.find((r) => r.kind === 'parked');
    assert.ok(parked && parked.kind === 'parked');
    assert.equal(parked.reason, 'gap-timeout');
    assert.equal(parked.key, 'a');
    assert.deepEqual(await f.effects(), [{ key: 'a', version: '1' }]);
  });

  test('inbox - dedupe mode applies each event id once', async () => {
    const f = await fixture();
    const inbox = f.inbox({
      mode: 'dedupe',
      handlers: {
        Set: async (event, { tx }) => {
          await tx.query(EFFECT_SQL(f.s).effect, [event.id, event.version.toString()]);
        },
      },
    });
    await inbox.start();
    const p = f.stream.prefix;
    const events = [
      ferryEvent(p, { key: 'a', version: 1 }),
      ferryEvent(p, { key: 'a', version: 1 }),
      ferryEvent(p, { key: 'b', version: 7 }),
    ];
    await publishEvents(f.stream.nc, events);
    await publishEvents(f.stream.nc, [events[0]!, events[2]!], { msgIdSuffix: 'copy' });
    await waitFor(() => inbox.counts().applied + inbox.counts().duplicate === 5, { what: 'five messages settled' });
    assert.equal(inbox.counts().applied, 3);
    assert.equal(inbox.counts().duplicate, 2);
    assert.equal(countReports(f.reports, 'duplicate'), 2);
    const { rows } = await f.db.pool.query(`SELECT id FROM ${f.s}.inbox_messages WHERE consumer = 'billing'`);
    assert.equal(rows.length, 3);
  });

  test('inbox - dedupe mode prunes message ids past the retention window through a pg-boss cron job', async () => {
    const f = await fixture();
    const inbox = f.inbox({ mode: 'dedupe', dedupeRetentionMs: 3_600_000, handlers: {} });
    await inbox.start();
    const boss = new PgBoss({ connectionString: f.db.url, schema: f.bossSchema, supervise: false, schedule: false, max: 2 });
    boss.on('error', () => {});
    await boss.start();
    try {
      const schedules = await boss.getSchedules(pruneQueueName('billing'));
      assert.equal(schedules.length, 1);
      assert.match(schedules[0]?.cron ?? '', /\*/);
      const insert = `INSERT INTO ${f.s}.inbox_messages (consumer, id, received_at) VALUES ($1, $2, now() - $3 * interval '1 second')`;
      await f.db.pool.query(insert, ['billing', 'old', 7_200]);
      await f.db.pool.query(insert, ['billing', 'fresh', 60]);
      await f.db.pool.query(insert, ['other', 'old', 7_200]);
      // What the cron job does, on demand: one job on the prune queue.
      await boss.send(pruneQueueName('billing'), null);
      await waitFor(
        async () =>
          (await f.db.pool.query(`SELECT 1 FROM ${f.s}.inbox_messages WHERE consumer = 'billing' AND id = 'old'`)).rows.length === 0,
        { what: 'the old id pruned by the worker', timeoutMs: 10_000 },
      );
      const { rows } = await f.db.pool.query(`SELECT consumer, id FROM ${f.s}.inbox_messages ORDER BY consumer, id`);
      assert.deepEqual(rows, [
        { consumer: 'billing', id: 'fresh' },
        { consumer: 'other', id: 'old' },
      ]);
      assert.equal(await pruneInboxMessages({ pool: f.db.pool, schema: f.db.schema, consumer: 'other', olderThanMs: 3_600_000 }), 1);
    } finally {
      await boss.stop({ graceful: false });
    }
  });

  test('inbox - replaying the whole stream into the existing consumer is a no-op, into a new consumer it rebuilds the same state', async () => {
    const f = await fixture();
    await f.db.pool.query(`CREATE TABLE ${f.s}.state_rebuilt (key text PRIMARY KEY, version bigint NOT NULL)`);
    const inbox = f.inbox({ mode: 'latest', handlers: { Set: effectHandler(f) } });
    await inbox.start();
    const p = f.stream.prefix;
    const events = [];
    for (let v = 1; v <= 5; v++) for (const key of ['a', 'b', 'c']) events.push(ferryEvent(p, { key, version: v }));
    await publishEvents(f.stream.nc, events);
    await waitFor(() => inbox.counts().applied === 15, { what: 'all applied' });
    const before = await f.effects();
    // Replay: every event published again (new message ids), into the same consumer.
    await publishEvents(f.stream.nc, events, { msgIdSuffix: 'replay' });
    await waitFor(() => inbox.counts().stale + inbox.counts().duplicate === 15, { what: 'the replay settled as stale or duplicate' });
    assert.equal(inbox.counts().duplicate, 3, 'the last version of each key is a duplicate, the others stale');
    assert.deepEqual(await f.effects(), before);
    assert.equal(inbox.counts().applied, 15);
    // A new consumer reads the whole stream (30 messages) and ends in the same state.
    const rebuilt = f.inbox({ consumer: 'billing_rebuilt', mode: 'latest', handlers: { Set: effectHandler(f, 'state_rebuilt') } });
    await rebuilt.start();
    await waitFor(() => rebuilt.counts().applied + rebuilt.counts().stale + rebuilt.counts().duplicate === 30, {
      what: 'the new consumer caught up',
    });
    assert.equal(rebuilt.counts().applied, 15);
    const state = await f.db.pool.query(`SELECT key, version::text FROM ${f.s}.state ORDER BY key`);
    const again = await f.db.pool.query(`SELECT key, version::text FROM ${f.s}.state_rebuilt ORDER BY key`);
    assert.deepEqual(again.rows, state.rows);
    assert.deepEqual(
      state.rows.map((r) => r.version),
      ['5', '5', '5'],
    );
  });

  test('inbox - stop() stops fetching and waits for in-flight handlers to commit', async () => {
    const f = await fixture();
    let started = 0;
    const inbox = f.inbox({
      mode: 'latest',
      handlers: {
        Set: async (event, ctx) => {
          started++;
          await sleep(400);
          await effectHandler(f)(event, ctx);
        },
      },
    });
    await inbox.start();
    await publishEvents(f.stream.nc, [
      ferryEvent(f.stream.prefix, { key: 'a', version: 1 }),
      ferryEvent(f.stream.prefix, { key: 'b', version: 1 }),
    ]);
    await waitFor(() => started === 2, { what: 'both handlers running' });
    assert.equal(inbox.inFlight(), 2);
    await inbox.stop();
    assert.equal(inbox.state, 'stopped');
    assert.equal(inbox.inFlight(), 0);
    assert.equal((await f.effects()).length, 2, 'both in-flight effects committed before stop() resolved');
    assert.equal(inbox.counts().applied, 2);
    // Stopped means stopped: a later event is not consumed.
    await publishEvents(f.stream.nc, [ferryEvent(f.stream.prefix, { key: 'c', version: 1 })]);
    await sleep(300);
    assert.equal((await f.effects()).length, 2);
  });

  test('inbox - a handler slower than the ack wait is kept in progress, not redelivered', async () => {
    const f = await fixture();
    let calls = 0;
    const inbox = f.inbox({
      ackWaitMs: 1_000,
      handlers: {
        Set: async (event, ctx) => {
          calls++;
          await sleep(2_500);
          await effectHandler(f)(event, ctx);
        },
      },
    });
    await inbox.start();
    await publishEvents(f.stream.nc, [ferryEvent(f.stream.prefix, { key: 'slow', version: 1 })]);
    await waitFor(() => inbox.counts().applied === 1, { what: 'the slow event applied', timeoutMs: 10_000 });
    await sleep(1_200);
    const info = await f.stream.jsm.consumers.info(f.stream.name, 'billing');
    assert.equal(info.num_redelivered, 0);
    assert.equal(calls, 1);
    assert.equal(inbox.counts().duplicate, 0);
  });

  test('inbox - the first version of a new key is serialised across processes: two racing deliveries apply it once', async () => {
    const f = await fixture();
    // A second stream consumed under the same consumer name: two inboxes gate on the same (consumer, key) rows.
    const other = await createTestStream();
    try {
      let calls = 0;
      const handler: Handler = async (event, ctx) => {
        calls++;
        await sleep(300);
        await effectHandler(f)(event, ctx);
      };
      const a = f.inbox({ handlers: { Set: handler } });
      const b = f.inbox({ nc: other.nc, stream: other.name, handlers: { Set: handler } });
      await Promise.all([a.start(), b.start()]);
      const event = ferryEvent(f.stream.prefix, { key: 'brand-new', version: 1 });
      await Promise.all([publishEvents(f.stream.nc, [event]), publishEvents(other.nc, [{ ...event, subject: `${other.prefix}.set` }])]);
      await waitFor(() => a.counts().applied + b.counts().applied + a.counts().duplicate + b.counts().duplicate === 2, {
        what: 'both deliveries settled',
      });
      assert.equal(a.counts().applied + b.counts().applied, 1);
      assert.equal(a.counts().duplicate + b.counts().duplicate, 1);
      assert.equal(calls, 1, 'the loser waited on the row, then skipped its handler');
      assert.deepEqual(await f.effects(), [{ key: 'brand-new', version: '1' }]);
      await b.stop();
    } finally {
      await other.close();
    }
  });

  test('inbox - start creates the durable pull consumer with explicit ack and ack pending bounded by concurrency', async () => {
    const f = await fixture();
    const inbox = f.inbox({ concurrency: 4, ackWaitMs: 20_000, filterSubjects: [`${f.stream.prefix}.>`], handlers: {} });
    await inbox.start();
    const info = await f.stream.jsm.consumers.info(f.stream.name, 'billing');
    assert.equal(info.config.ack_policy, AckPolicy.Explicit);
    assert.equal(info.config.max_ack_pending, 8);
    assert.equal(info.config.ack_wait, 20_000 * 1_000_000);
    assert.equal(info.config.filter_subject, `${f.stream.prefix}.>`);
    assert.equal(info.config.durable_name, 'billing');
    await inbox.stop();
    // A second start with other settings updates it.
    const again = f.inbox({ concurrency: 10, ackWaitMs: 20_000, filterSubjects: [`${f.stream.prefix}.>`], handlers: {} });
    await again.start();
    assert.equal((await f.stream.jsm.consumers.info(f.stream.name, 'billing')).config.max_ack_pending, 20);
  });

  test('inbox - with manageConsumer false a missing or different consumer fails start with a clear error', async () => {
    const f = await fixture();
    const missing = f.inbox({ consumer: 'nobody', manageConsumer: false, handlers: {} });
    await assert.rejects(missing.start(), (err: unknown) => isConsumerMismatchError(err) && /"nobody".*does not exist/.test(err.message));
    await f.stream.jsm.consumers.add(f.stream.name, { durable_name: 'wrong', ack_policy: AckPolicy.None, ack_wait: 30_000_000_000 });
    const wrong = f.inbox({ consumer: 'wrong', manageConsumer: false, handlers: {} });
    await assert.rejects(
      wrong.start(),
      (err: unknown) => isConsumerMismatchError(err) && /ack_policy "none", need "explicit"/.test(err.message),
    );
    await f.stream.jsm.consumers.add(f.stream.name, { durable_name: 'right', ack_policy: AckPolicy.Explicit, ack_wait: 30_000_000_000 });
    const right = f.inbox({ consumer: 'right', manageConsumer: false, handlers: {} });
    await right.start();
    assert.equal(right.state, 'running');
  });

  test('inbox - migrateInbox creates the consumer tables with the parked count, and is idempotent', async () => {
    const f = await fixture();
    const schema = `${f.db.schema}_m`;
    try {
      const first = await migrateInbox({ pool: f.db.pool, schema });
      assert.deepEqual(
        first.applied.map((m) => m.name),
        [
          'inbox',
          'inbox_parked',
          'inbox_early',
          'inbox_skipped',
          'versions_fillfactor',
          'row_security',
          'next_version_no_overflow',
          'inbox_instances',
        ],
      );
      // Room on each page for the per-event update to stay HOT (inbox migration 000005).
      const { rows: options } = await f.db.pool.query(`SELECT reloptions FROM pg_class WHERE oid = $1::regclass`, [
        `${quoteIdentifier(schema)}.inbox_versions`,
      ]);
      assert.deepEqual(options[0]?.reloptions, ['fillfactor=70']);
      const { rows } = await f.db.pool.query(
        `SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'inbox_versions' ORDER BY ordinal_position`,
        [schema],
      );
      assert.deepEqual(
        rows.map((r) => r.column_name),
        ['consumer', 'key', 'version', 'applied_at', 'parked', 'skipped'],
      );
      assert.deepEqual((await migrateInbox({ pool: f.db.pool, schema })).applied, []);
    } finally {
      await f.db.pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    }
  });

  test('inbox - more than one filter subject is refused with a ValidationError (nats-server 2.9 takes one)', async () => {
    const f = await fixture();
    assert.throws(
      () => f.inbox({ filterSubjects: ['a.x', 'a.y'], handlers: {} }),
      (err: unknown) => isValidationError(err) && err.field === 'filterSubjects' && /one filter subject/.test(err.message),
    );
  });
});
