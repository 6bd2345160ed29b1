// Failure proofs (issue 7): duplicates at the producer. The `ferry relay`
// binary and an inbox consumer run as child processes against real
// PostgreSQL and the shared nats-server.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createPublisher } from '@ferry/publisher';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import {
  type ConsumerProcess,
  effectCounts,
  effectTablesSql,
  outboxCounts,
  publishSets,
  startConsumer,
  startRelay,
  stopRelay,
  streamMessages,
  waitEffects,
} from './fixtures/proof-support.js';
import type { RelayProcess } from './relay-helpers.js';

describe('failure proofs: duplicate publishes', () => {
  let db: TestDatabase;
  let stream: TestStream;
  let relay: RelayProcess;
  let consumer: ConsumerProcess;

  before(async () => {
    db = await createTestDatabase({ prefix: 'proof_dup', migrate: ['outbox', 'inbox'], lanes: 4 });
    await db.pool.query(effectTablesSql(db.schema));
    stream = await createTestStream({ prefix: 'proofdup' });
    relay = startRelay(db.url, db.schema, stream.nc.getServer());
    consumer = await startConsumer({
      databaseUrl: db.url,
      natsUrl: stream.nc.getServer(),
      schema: db.schema,
      bossSchema: `${db.schema}_boss`,
      stream: stream.name,
      consumer: 'proof',
    });
  });

  after(async () => {
    await consumer?.kill('SIGTERM');
    if (relay) await stopRelay(relay);
    await stream?.close();
    await db?.pool.query(`DROP SCHEMA IF EXISTS "${db.schema}_boss" CASCADE`).catch(() => {});
    await db?.close();
  });

  test('proof - the same publish twice gives one event, the stored result, and one effect', async () => {
    const id = randomUUID();
    const [first, second] = await publishSets(db.pool, db.schema, stream.prefix, [
      { key: 'twice', id },
      { key: 'twice', id },
    ]);
    assert.equal(first?.existing, false);
    assert.equal(second?.existing, true, 'the second call returns the stored result');
    assert.equal(second?.seq, first?.seq);
    assert.equal(second?.version, first?.version);
    await waitEffects(db.pool, db.schema, 'proof', 1);
    await sleep(1000); // room for a second effect to show up
    assert.deepEqual(await outboxCounts(db.pool, db.schema), { rows: 1, pending: 0 }, 'one outbox row, published');
    assert.equal(await streamMessages(stream.nc, stream.name), 1, 'one stream message');
    assert.deepEqual(await effectCounts(db.pool, db.schema, 'proof'), { effects: 1, doubled: 0, totals: 1 }, 'one effect');
  });

  test('proof - two simultaneous publishes of one id give one row, one stream message and one effect', async () => {
    const id = randomUUID();
    const publisher = createPublisher({ schema: db.schema, source: 'proof' });
    const a = await db.pool.connect();
    const b = await db.pool.connect();
    try {
      const input = { subject: `${stream.prefix}.set`, key: 'race', type: 'Set', data: { key: 'race' }, id };
      await a.query('BEGIN');
      await b.query('BEGIN');
      // Both transactions insert the id before either commits: b waits on a's uncommitted row.
      const ra = await publisher.publish(a, input);
      // Settled at once, so its rejection is never unhandled while a commits.
      const rbOutcome = publisher.publish(b, input).then(
        () => undefined,
        (err: unknown) => err,
      );
      const bPid = (b as unknown as { processID: number }).processID;
      await waitFor(
        async () =>
          (await db.pool.query(`SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1`, [bPid])).rows[0]?.wait_event_type === 'Lock',
        { what: "the second transaction to wait on the first one's row" },
      );
      await a.query('COMMIT');
      // b's insert waited on a's row, and is told so: its transaction is aborted, and a retry returns the stored event.
      assert.equal(((await rbOutcome) as { code?: string } | undefined)?.code, 'FERRY_CONFLICT');
      await b.query('ROLLBACK');
      await b.query('BEGIN');
      const rb = await publisher.publish(b, input);
      await b.query('COMMIT');
      assert.deepEqual([ra.existing, rb.existing], [false, true], 'the retry of the later transaction gets the stored result');
      assert.equal(rb.seq, ra.seq);
    } finally {
      a.release();
      b.release();
    }
    await waitEffects(db.pool, db.schema, 'proof', 2);
    await sleep(1000);
    const { rows } = await db.pool.query(`SELECT seq FROM "${db.schema}".outbox WHERE id = $1`, [id]);
    assert.equal(rows.length, 1, 'one outbox row for the id');
    assert.equal(await streamMessages(stream.nc, stream.name), 2, 'one stream message for the id (plus the first test’s)');
    assert.deepEqual(await effectCounts(db.pool, db.schema, 'proof'), { effects: 2, doubled: 0, totals: 2 }, 'one effect for the id');
    assert.equal(consumer.reports.filter((r) => r.kind === 'applied' && r.id === id).length, 1);
  });
});
