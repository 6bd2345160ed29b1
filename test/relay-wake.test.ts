import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { quoteIdentifier, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createRelay, type Relay } from '@ferry/relay';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import { publishEvents } from './relay-helpers.js';

/**
 * The default wake-up (outbox migration 000007): an idle relay records that
 * it waits, the publish functions NOTIFY at commit only while it does, and a
 * busy relay's publishers send no NOTIFY. The poll interval is a minute here,
 * so only a NOTIFY can deliver an event within seconds.
 */
describe('relay wake-up', () => {
  let db: TestDatabase;
  let stream: TestStream;
  let s: string;
  const relays: Relay[] = [];

  before(async () => {
    db = await createTestDatabase({ prefix: 'relay_wake', lanes: 4 });
    stream = await createTestStream({ prefix: 'relaywake' });
    s = quoteIdentifier(db.schema);
  });

  after(async () => {
    for (const r of relays) await r.stop();
    await stream?.close();
    await db?.close();
  });

  const waitRecords = async () =>
    (await db.pool.query<{ instance: string; current: boolean }>(`SELECT instance, until > now() AS current FROM ${s}.relay_waiting`)).rows;

  const streamCount = async () => (await stream.jsm.streams.info(stream.name)).state.messages;

  function start(listen: boolean): Promise<Relay> {
    const relay = createRelay({
      databaseUrl: db.url,
      schema: db.schema,
      nats: { servers: stream.nc.getServer() },
      maintenance: false,
      pollIntervalMs: 60_000,
      listen,
    });
    relays.push(relay);
    return relay.start().then(() => relay);
  }

  test('relay - an idle relay is woken at commit by the default publisher, records its wait only while idle, and forgets it on stop', async () => {
    const relay = await start(true);
    await waitFor(async () => (await waitRecords()).some((r) => r.instance === relay.instanceId && r.current), {
      timeoutMs: 10_000,
      what: 'the idle relay to record its wait',
    });
    const publisher = createPublisher({ schema: db.schema, source: 'wake-test' });
    for (let i = 0; i < 3; i++) {
      const before = await streamCount();
      const committed = Date.now();
      await withTransaction(db.pool, (tx) =>
        publisher.publish(tx, { subject: `${stream.prefix}.orders`, key: `k${i}`, type: 'OrderPlaced', data: { i } }),
      );
      await waitFor(async () => (await streamCount()) === before + 1, { timeoutMs: 5_000, intervalMs: 2, what: 'the event in the stream' });
      assert.ok(Date.now() - committed < 5_000, 'delivered long before the 60 s poll');
      // Idle again: the wait is recorded again before the next poll.
      await waitFor(async () => (await waitRecords()).some((r) => r.instance === relay.instanceId && r.current), {
        timeoutMs: 5_000,
        what: 'the wait recorded again',
      });
    }
    await relay.stop();
    assert.deepEqual(
      (await waitRecords()).filter((r) => r.instance === relay.instanceId),
      [],
      'a stopped relay leaves no wait record',
    );
  });

  test('relay - a relay started without LISTEN records no wait, so publishers send no NOTIFY', async () => {
    // Committed before the start: the relay's first claim finds them (nothing would wake it later).
    await publishEvents(db.pool, db.schema, stream.prefix, 20, { keys: 5, perTx: 5 });
    const relay = await start(false);
    await waitFor(
      async () => Number((await db.pool.query(`SELECT count(*) FROM ${s}.outbox_events WHERE published_at IS NULL`)).rows[0].count) === 0,
      {
        timeoutMs: 10_000,
        what: 'the first claim to drain the backlog',
      },
    );
    assert.deepEqual(
      (await waitRecords()).filter((r) => r.instance === relay.instanceId),
      [],
    );
    await relay.stop();
  });

  test('relay - a relay with a backlog clears its record once it has found work for the keep time: publishers of a relay polling back to back send no NOTIFY', async () => {
    const relay = await start(true);
    await waitFor(async () => (await waitRecords()).some((r) => r.instance === relay.instanceId && r.current), {
      timeoutMs: 10_000,
      what: 'the idle relay to record its wait',
    });
    // A backlog the relay drains over many claims, back to back (its first transaction wakes it): once
    // every poll has found work for WAIT_KEPT_WHILE_BUSY_MS, no record is current.
    const drained = publishEvents(db.pool, db.schema, stream.prefix, 6000, { keys: 300, perTx: 3000, notify: true });
    let sawBusy = false;
    await waitFor(
      async () => {
        const mine = (await waitRecords()).find((r) => r.instance === relay.instanceId);
        if (mine && !mine.current) sawBusy = true;
        return sawBusy;
      },
      { timeoutMs: 30_000, intervalMs: 2, what: 'the busy relay to clear its wait record' },
    );
    await drained;
    // Drained: idle again, it records its wait again.
    await waitFor(async () => (await waitRecords()).some((r) => r.instance === relay.instanceId && r.current), {
      timeoutMs: 30_000,
      what: 'the wait recorded again after the drain',
    });
    await relay.stop();
  });
});
