import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { quoteIdentifier, relayBossSchemaFor, withTransaction } from '@ferry/core';
import { createRelay, type Relay, type RelayEvents } from '@ferry/relay';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import { markPending, setFailed } from './delivery-state.js';
import { ferry } from './ops-helpers.js';
import { countPending, publishEvents } from './relay-helpers.js';

describe('relay maintenance through pg-boss', () => {
  let db: TestDatabase;
  let stream: TestStream;
  const relays: Relay[] = [];

  before(async () => {
    db = await createTestDatabase({ prefix: 'relay_prune', lanes: 4 });
    stream = await createTestStream({ prefix: 'relayprune' });
  });

  after(async () => {
    for (const r of relays) await r.stop();
    await stream?.close();
    await db?.close();
  });

  test('relay - the prune cron job runs exactly once per occurrence with two instances, in bounded batches', async () => {
    const runs: Array<RelayEvents['relay:prune']> = [];
    const s = quoteIdentifier(db.schema);
    await publishEvents(db.pool, db.schema, stream.prefix, 300, { keys: 30 });
    const first = createRelay({ databaseUrl: db.url, schema: db.schema, nats: { servers: stream.nc.getServer() }, maintenance: false });
    await first.start();
    await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 15_000, what: 'the events to be published' });
    await first.stop();
    // The outbox's one retention, which every instance's prune run uses (and a relay given another refuses to start).
    const set = await ferry(['migrate', '--database-url', db.url, '--schema', db.schema, '--retention', '1s', '--yes']);
    assert.equal(set.code, 0, set.err);
    await sleep(1100); // now older than the 1 s retention
    for (let i = 0; i < 2; i++) {
      const relay = createRelay({
        databaseUrl: db.url,
        schema: db.schema,
        nats: { servers: stream.nc.getServer() },
        retentionMs: 1000,
        pruneCron: '* * * * *',
        pruneBatchSize: 40,
        cronMonitorIntervalSeconds: 1,
      });
      relay.on('relay:prune', (e) => runs.push(e));
      relays.push(relay);
    }
    await Promise.all(relays.map((r) => r.start()));
    // pg-boss cron has minute resolution: the current or the next minute's occurrence.
    await waitFor(() => runs.length > 0, { timeoutMs: 75_000, intervalMs: 200, what: 'a prune run' });
    await sleep(4000);
    const readJobs = () =>
      db.pool.query<{ id: string; slot: string }>(
        `SELECT id::text, singleton_on::text AS slot, singleton_key AS key, state, created_on::text AS created, data::text
           FROM ${quoteIdentifier(relayBossSchemaFor(db.schema))}.job WHERE name = 'ferry-prune' ORDER BY created_on`,
      );
    // A minute boundary inside the wait schedules the next occurrence: let it run before counting.
    await waitFor(async () => (await readJobs()).rows.length === runs.length, {
      timeoutMs: 30_000,
      intervalMs: 200,
      what: 'every scheduled prune job to have run',
    });
    const jobs = await readJobs();
    // pg-boss files each occurrence as a job of its send-it queue under a per-occurrence singleton slot (both
    // instances' cron passes send it; the slot keeps one), and that job creates the queue's job, which has no
    // slot of its own. So: one send-it job per slot, and one prune job per send-it job. Two prune jobs are right
    // when the run spans a minute boundary (the occurrence before it, caught up, and the one after).
    const forwarded = await db.pool.query<{ slot: string }>(
      `SELECT data->>'slot' AS slot FROM ${quoteIdentifier(relayBossSchemaFor(db.schema))}.job
        WHERE name = '__pgboss__send-it' AND data->>'name' = 'ferry-prune'`,
    );
    const slots = new Set(forwarded.rows.map((r) => r.slot));
    assert.equal(slots.size, forwarded.rows.length, `one send-it job per occurrence: ${JSON.stringify(forwarded.rows)}`);
    assert.equal(
      jobs.rows.length,
      slots.size,
      `one prune job per occurrence though both instances run the schedule: ${JSON.stringify({ jobs: jobs.rows, slots: [...slots] })}`,
    );
    assert.equal(new Set(runs.map((r) => r.jobId)).size, runs.length, `no job ran twice: ${JSON.stringify(runs)}`);
    assert.equal(runs.length, jobs.rows.length, 'one run per scheduled occurrence, on one of the two instances');
    assert.ok(runs.length <= 3, `${runs.length} runs in the minute or so of the test`);
    assert.equal(
      runs.reduce((n, r) => n + r.deleted, 0),
      300,
      'every published row past the retention is gone, over several bounded statements',
    );
    const { rows } = await db.pool.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${s}.outbox`);
    assert.equal(rows[0]?.n, '0');
  });

  test('relay - prune keeps unpublished rows and rows inside the retention window', async () => {
    const relay = relays[0] as Relay;
    await publishEvents(db.pool, db.schema, stream.prefix, 50, { keys: 5 });
    await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 15_000, what: 'the events to be published' });
    const s = quoteIdentifier(db.schema);
    // A dead row is unpublished however old it is: the relay leaves it alone and prune must too.
    const dead = await db.pool.query<{ id: string }>(`SELECT id::text FROM ${s}.outbox WHERE seq = (SELECT max(seq) FROM ${s}.outbox)`);
    const lastSeq = `o.seq = (SELECT max(seq) FROM ${s}.outbox)`;
    // Pending again and dead in one transaction, as the one update did: no relay can take it in between.
    await withTransaction(db.pool, async (tx) => {
      assert.equal(await markPending(tx, db.schema, lastSeq, []), 1);
      assert.equal(await setFailed(tx, db.schema, lastSeq, [], { attempts: 1, dead: true }), 1);
    });
    // Delivery records no Ferry statement writes (the owner's hand): one for the pending dead row, one
    // for an event that is gone. Neither is a published event to prune, nor may they stall the batch.
    await db.pool.query(
      `INSERT INTO ${s}.outbox_published (seq, published_at) SELECT max(seq), now() - interval '1 hour' FROM ${s}.outbox
       UNION ALL SELECT max(seq) + 1000000, now() - interval '1 hour' FROM ${s}.outbox`,
    );
    assert.equal(await relay.prune(), 0, 'just published rows are inside the 1 s window');
    await sleep(1200);
    assert.equal(await relay.prune(), 49);
    const left = await db.pool.query<{ id: string }>(`SELECT id::text FROM ${s}.outbox`);
    assert.deepEqual(
      left.rows.map((r) => r.id),
      [dead.rows[0]?.id],
    );
  });
});
