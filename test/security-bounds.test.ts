// Resource bounds of the inbox: with handlers that block, the work in flight
// never exceeds `concurrency` running handlers, nor `maxAckPending` messages
// taken from the stream (queued + running), and the server holds the rest.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { encodeEvent } from '@ferry/core';
import { createInbox, type Inbox } from '@ferry/inbox';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import { jetstream } from '@nats-io/jetstream';
import { headers } from '@nats-io/transport-node';

const EVENTS = 200;
const CONCURRENCY = 4;
const MAX_ACK_PENDING = 10;

describe('inbox in-flight work is bounded', () => {
  let db: TestDatabase;
  let stream: TestStream;
  let inbox: Inbox | undefined;

  before(async () => {
    db = await createTestDatabase({ prefix: 'sec_bounds', migrate: ['inbox'] });
    stream = await createTestStream({ prefix: 'secbounds' });
    const js = jetstream(stream.nc);
    const acks = [];
    for (let i = 0; i < EVENTS; i++) {
      const e = encodeEvent({
        id: randomUUID(),
        key: `k${i % 100}`,
        version: BigInt(Math.floor(i / 100) + 1),
        subject: `${stream.prefix}.set`,
        type: 'Set',
        source: 'sec',
        time: new Date(),
        contentType: 'application/json',
        data: Buffer.from('{}'),
        headers: {},
      });
      const h = headers();
      for (const [n, v] of e.headers) h.set(n, v);
      acks.push(js.publish(e.subject, e.body, { headers: h }));
    }
    await Promise.all(acks);
  });

  after(async () => {
    await inbox?.stop().catch(() => {});
    await stream?.close();
    await db.pool.query(`DROP SCHEMA IF EXISTS "${db.schema}_boss" CASCADE`);
    await db?.close();
  });

  test('security - blocked handlers: running handlers never exceed concurrency, messages held never exceed maxAckPending', async () => {
    let running = 0;
    let maxRunning = 0;
    let applied = 0;
    let release: () => void = () => {};
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    inbox = createInbox<{ Set: unknown }>({
      pool: db.pool,
      nc: stream.nc,
      stream: stream.name,
      consumer: 'bounded',
      schema: db.schema,
      bossSchema: `${db.schema}_boss`,
      concurrency: CONCURRENCY,
      maxAckPending: MAX_ACK_PENDING,
      handlers: {
        Set: async () => {
          running++;
          maxRunning = Math.max(maxRunning, running);
          try {
            await gate;
          } finally {
            running--;
            applied++;
          }
        },
      },
    });
    await inbox.start();
    await waitFor(() => running >= CONCURRENCY, { timeoutMs: 10_000, what: `${CONCURRENCY} handlers blocked` });
    // Watch for a while: more messages would arrive now if nothing bounded them.
    let maxHeld = 0;
    const until = Date.now() + 1500;
    while (Date.now() < until) {
      maxHeld = Math.max(maxHeld, inbox.inFlight());
      await new Promise((r) => setTimeout(r, 20));
    }
    const info = await stream.jsm.consumers.info(stream.name, 'bounded');
    assert.equal(maxRunning, CONCURRENCY, 'running handlers at most concurrency');
    assert.ok(maxHeld <= MAX_ACK_PENDING, `held ${maxHeld} messages, bound ${MAX_ACK_PENDING}`);
    assert.ok(info.num_ack_pending <= MAX_ACK_PENDING, `server: ${info.num_ack_pending} unacknowledged`);
    assert.ok(info.num_pending >= EVENTS - MAX_ACK_PENDING, `the server keeps the rest (${info.num_pending} pending)`);
    release();
    await waitFor(() => applied === EVENTS, { timeoutMs: 20_000, what: 'every event applied after the release' });
    assert.ok(maxRunning <= CONCURRENCY);
  });
});
