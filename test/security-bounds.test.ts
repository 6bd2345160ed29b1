// Resource bounds. The inbox: with handlers that block, the work in flight
// never exceeds `concurrency` running handlers, nor `maxAckPending` messages
// taken from the stream (queued + running), and the server holds the rest.
// The relay: a backlog of 1 MB events is drained within a bounded RSS
// (bench/scenarios/relay-memory.ts measures the large sizes).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { encodeEvent, quoteIdentifier } from '@ferry/core';
import { createInbox, type Inbox } from '@ferry/inbox';
import { createTestDatabase, createTestStream, NatsServer, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import { jetstream, jetstreamManager, StorageType } from '@nats-io/jetstream';
import { connect, headers } from '@nats-io/transport-node';
import { FERRY_BIN } from './relay-helpers.js';

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

describe('relay memory is bounded with large payloads', () => {
  const EVENTS_1MB = 300;
  /** 300 MB of backlog; the relay holds at most 64 MiB of event data in flight. */
  const PEAK_RSS_LIMIT_MB = 500;
  let db: TestDatabase;
  let nats: NatsServer;

  before(async () => {
    db = await createTestDatabase({ prefix: 'sec_relay_mem', lanes: 4 });
    nats = await NatsServer.start({ config: 'max_payload: 2097152' });
  });

  after(async () => {
    await nats?.stop();
    await db?.close();
  });

  test('security - the relay drains 300 events of 1 MB with peak RSS under 500 MB (event bytes in flight are bounded)', async () => {
    const nc = await connect({ servers: nats.url });
    try {
      await (await jetstreamManager(nc)).streams.add({ name: 'BIG', subjects: ['big.>'], storage: StorageType.File });
    } finally {
      await nc.close();
    }
    const s = quoteIdentifier(db.schema);
    for (let start = 0; start < EVENTS_1MB; start += 50) {
      await db.pool.query(
        `INSERT INTO ${s}.outbox (id, key, version, subject, type, source, content_type, data, headers, occurred_at)
         SELECT gen_random_uuid(), 'k' || i, 1, 'big.events', 'Big', 'sec', 'application/octet-stream',
                convert_to(repeat(md5(i::text), 31250), 'UTF8'), '{}'::jsonb, now()
           FROM generate_series($1::int, $2::int) AS i`,
        [start, start + 49],
      );
    }
    const child = spawn(
      process.execPath,
      [FERRY_BIN, 'relay', '--database-url', db.url, '--schema', db.schema, '--nats-url', nats.url, '--no-maintenance', '--http-port', '0'],
      { stdio: 'ignore' },
    );
    const exited = new Promise<number | null>((resolve) => child.once('close', resolve));
    let peakKb = 0;
    try {
      await waitFor(
        async () => {
          const m = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'));
          peakKb = Math.max(peakKb, Number(m?.[1] ?? 0));
          const { rows } = await db.pool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM ${s}.outbox_events WHERE published_at IS NULL`,
          );
          return rows[0]?.n === 0;
        },
        { timeoutMs: 120_000, what: 'the 1 MB backlog drained' }, // a bound on memory, not on speed: the suite's heaviest tests may run beside it,
      );
      peakKb = Math.max(peakKb, Number(/^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))?.[1] ?? 0));
    } finally {
      child.kill('SIGTERM');
    }
    assert.equal(await exited, 0);
    const peakMb = Math.round(peakKb / 1024);
    assert.ok(peakMb > 0, 'VmHWM was read');
    assert.ok(peakMb < PEAK_RSS_LIMIT_MB, `peak RSS ${peakMb} MB draining ${EVENTS_1MB} MB of events`);
  });
});
