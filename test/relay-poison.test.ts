import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { quoteIdentifier, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createRelay, main, type Relay, type RelayEvents } from '@ferry/relay';
import { createTestDatabase, createTestStream, NatsServer, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import { publishEvents, readStream } from './relay-helpers.js';

/** Runs `ferry …` in-process and returns its exit code and output. */
async function ferry(...args: string[]): Promise<{ code: number; out: string[]; err: string[] }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(['node', 'ferry', ...args], { out: (l) => out.push(l), err: (l) => err.push(l), env: {} });
  return { code, out, err };
}

describe('relay poison events and the dead-letter commands', () => {
  let db: TestDatabase;
  let nats: NatsServer;
  let stream: TestStream;
  let relay: Relay;
  const dead: Array<RelayEvents['relay:row:dead']> = [];

  before(async () => {
    // A private server whose max_payload is small, so an event can be too large for it.
    nats = await NatsServer.start({ config: 'max_payload: 4096' });
    db = await createTestDatabase({ prefix: 'relay_poison', lanes: 4 });
    stream = await createTestStream({ servers: nats.url, prefix: 'poison' });
  });

  after(async () => {
    await relay?.stop();
    await stream?.close();
    await nats?.stop();
    await db?.close();
  });

  test('relay - a poison event blocks only its own key and goes dead at once with its reason', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'relay-test' });
    const healthy1 = await publishEvents(db.pool, db.schema, stream.prefix, 1000, { keys: 1000, keyPrefix: 'h' });
    const poison = await withTransaction(db.pool, (tx) =>
      publisher.publish(tx, { subject: `${stream.prefix}.orders`, key: 'poison', type: 'Huge', data: { blob: 'x'.repeat(8000) } }),
    );
    const behind = await withTransaction(db.pool, (tx) =>
      publisher.publish(tx, { subject: `${stream.prefix}.orders`, key: 'poison', type: 'Small', data: { ok: true } }),
    );
    const healthy2 = await publishEvents(db.pool, db.schema, stream.prefix, 1000, { keys: 1000, keyPrefix: 'h' });

    relay = createRelay({ databaseUrl: db.url, schema: db.schema, nats: { servers: nats.url }, maintenance: false, listen: false });
    relay.on('relay:row:dead', (e) => dead.push(e));
    await relay.start();
    const s = quoteIdentifier(db.schema);
    await waitFor(
      async () => {
        const { rows } = await db.pool.query<{ n: string }>(
          `SELECT count(*)::text AS n FROM ${s}.outbox_events WHERE published_at IS NOT NULL`,
        );
        return Number(rows[0]?.n) === 2000;
      },
      { timeoutMs: 30_000, what: 'the 2,000 healthy events to be published' },
    );
    const events = await readStream(stream.nc, stream.name);
    assert.equal(events.length, 2000, 'every healthy event is in the stream, nothing of the poison key');
    const ids = new Set(events.map((e) => e.id));
    for (const id of [...healthy1, ...healthy2]) assert.ok(ids.has(id), `healthy event ${id} published`);
    assert.ok(!ids.has(poison.id) && !ids.has(behind.id));

    const { rows } = await db.pool.query<{ id: string; dead_at: Date | null; attempts: number; last_error: string | null }>(
      `SELECT id::text, dead_at, attempts, last_error FROM ${s}.outbox_events WHERE key = 'poison' ORDER BY seq`,
    );
    assert.ok(rows[0]?.dead_at, 'the poison event is dead');
    assert.equal(rows[0]?.attempts, 1, 'dead at the first attempt: retrying cannot help');
    assert.match(rows[0]?.last_error ?? '', /^max_payload: .*max_payload/);
    assert.equal(rows[1]?.dead_at, null, 'the later event of the key is not dead, it waits');
    assert.equal(dead.length, 1);
    assert.equal(dead[0]?.reason, 'max_payload');
    assert.match(await relay.metrics(), /ferry_publish_failures_total\{reason="max_payload"\} 1/);

    const list = await ferry('dlq', 'list', '--json', '--database-url', db.url, '--schema', db.schema);
    assert.equal(list.code, 0, list.err.join('\n'));
    const listed = JSON.parse(list.out[0] ?? '[]') as Array<{ id: string; key: string }>;
    assert.deepEqual(
      listed.map((r) => [r.id, r.key]),
      [[poison.id, 'poison']],
    );
  });

  test('relay - ferry dlq discard keeps the dead event for audit and unblocks its key', async () => {
    const r = await ferry('dlq', 'discard', poisonId(), '--yes', '--database-url', db.url, '--schema', db.schema);
    assert.equal(r.code, 0, r.err.join('\n'));
    const s = quoteIdentifier(db.schema);
    await waitFor(
      async () => {
        const { rows } = await db.pool.query(`SELECT 1 FROM ${s}.outbox_events WHERE key = 'poison' AND published_at IS NULL`);
        return rows.length === 0;
      },
      { timeoutMs: 10_000, what: 'the event behind the discarded one to be published' },
    );
    const { rows } = await db.pool.query<{ dead_at: Date | null; last_error: string }>(
      `SELECT dead_at, last_error FROM ${s}.outbox_events WHERE key = 'poison' ORDER BY seq LIMIT 1`,
    );
    assert.ok(rows[0]?.dead_at, 'the discarded row is kept, still marked dead');
    assert.match(rows[0]?.last_error ?? '', /^discarded by ferry dlq discard/);
    const events = await readStream(stream.nc, stream.name);
    assert.deepEqual(
      events.filter((e) => e.key === 'poison').map((e) => e.version),
      [2n],
      'only the later event of the key reached the stream',
    );
    const again = await ferry('dlq', 'discard', poisonId(), '--yes', '--database-url', db.url, '--schema', db.schema);
    assert.equal(again.code, 1, 'a second discard finds no dead event');
  });

  test('relay - ferry dlq retry makes a dead event due again and it is published', async () => {
    // No stream covers this subject: every attempt fails (no responders) and one attempt is the maximum.
    await relay.stop();
    relay = createRelay({
      databaseUrl: db.url,
      schema: db.schema,
      nats: { servers: nats.url },
      maintenance: false,
      listen: true,
      maxAttempts: 1,
      publishTimeoutMs: 1000,
    });
    await relay.start();
    const publisher = createPublisher({ schema: db.schema, source: 'relay-test' });
    const orphan = await withTransaction(db.pool, (tx) =>
      publisher.publish(tx, { subject: 'nostream.x', key: 'orphan', type: 'T', data: 1 }),
    );
    const s = quoteIdentifier(db.schema);
    await waitFor(
      async () => {
        const { rows } = await db.pool.query(`SELECT 1 FROM ${s}.outbox_events WHERE id = $1 AND dead_at IS NOT NULL`, [orphan.id]);
        return rows.length === 1;
      },
      { timeoutMs: 15_000, what: 'the orphan event to be dead' },
    );
    const { rows } = await db.pool.query<{ last_error: string }>(`SELECT last_error FROM ${s}.outbox_events WHERE id = $1`, [orphan.id]);
    assert.match(rows[0]?.last_error ?? '', /^(no_responders|timeout):/);
    await stream.jsm.streams.add({ name: 'NOSTREAM', subjects: ['nostream.>'] });
    const r = await ferry('dlq', 'retry', orphan.id, '--yes', '--database-url', db.url, '--schema', db.schema);
    assert.equal(r.code, 0, r.err.join('\n'));
    assert.deepEqual(r.out, [`retried ${orphan.id}`]);
    await waitFor(
      async () => {
        const res = await db.pool.query(`SELECT 1 FROM ${s}.outbox_events WHERE id = $1 AND published_at IS NOT NULL AND dead_at IS NULL`, [
          orphan.id,
        ]);
        return res.rows.length === 1;
      },
      { timeoutMs: 15_000, what: 'the retried event to be published' },
    );
    const events = await readStream(stream.nc, 'NOSTREAM');
    assert.deepEqual(
      events.map((e) => e.id),
      [orphan.id],
    );
  });

  test('relay - a row backing off after a retryable failure holds back the later rows of its key only, then they follow in order', async () => {
    await relay.stop();
    relay = createRelay({
      databaseUrl: db.url,
      schema: db.schema,
      nats: { servers: nats.url },
      maintenance: false,
      publishTimeoutMs: 1000,
      backoffBaseMs: 1500,
      backoffMaxMs: 1500,
      pollIntervalMs: 100,
    });
    await relay.start();
    const publisher = createPublisher({ schema: db.schema, source: 'relay-test' });
    const s = quoteIdentifier(db.schema);
    const first = await withTransaction(db.pool, (tx) => publisher.publish(tx, { subject: 'later.a', key: 'held', type: 'T', data: 1 }));
    await waitFor(
      async () => {
        const { rows } = await db.pool.query<{ attempts: number }>(`SELECT attempts FROM ${s}.outbox_events WHERE id = $1`, [first.id]);
        return (rows[0]?.attempts ?? 0) > 0;
      },
      { timeoutMs: 10_000, what: 'the first attempt to fail (no stream for later.a yet)' },
    );
    const second = await withTransaction(db.pool, (tx) =>
      publisher.publish(tx, { subject: `${stream.prefix}.orders`, key: 'held', type: 'T', data: 2 }),
    );
    const others = await publishEvents(db.pool, db.schema, stream.prefix, 200, { keys: 200, keyPrefix: 'free' });
    await waitFor(
      async () => {
        const { rows } = await db.pool.query(`SELECT 1 FROM ${s}.outbox_events WHERE id = ANY ($1::uuid[]) AND published_at IS NULL`, [
          others,
        ]);
        return rows.length === 0;
      },
      { timeoutMs: 15_000, what: 'the other keys to flow' },
    );
    const held = await db.pool.query(`SELECT 1 FROM ${s}.outbox_events WHERE id = $1 AND published_at IS NULL AND attempts = 0`, [
      second.id,
    ]);
    assert.equal(held.rows.length, 1, 'the later row of the key waits, untried, while the earlier one backs off');

    await stream.jsm.streams.add({ name: 'LATER', subjects: ['later.>'] });
    await waitFor(
      async () => {
        const { rows } = await db.pool.query(`SELECT 1 FROM ${s}.outbox_events WHERE key = 'held' AND published_at IS NULL`);
        return rows.length === 0;
      },
      { timeoutMs: 20_000, what: 'both rows of the key to be published once the stream exists' },
    );
    // The two rows went to two streams: JetStream's storage times show the retried row stored before the later one.
    const inLater = await stream.jsm.streams.getMessage('LATER', { seq: 1 });
    assert.equal(inLater?.header.get('ce-id'), first.id);
    const inStream = (await readStream(stream.nc, stream.name)).filter((e) => e.key === 'held');
    assert.deepEqual(
      inStream.map((e) => e.id),
      [second.id],
    );
    const later = await stream.jsm.streams.getMessage(stream.name, { seq: inStream[0]?.streamSeq ?? 0 });
    assert.ok(inLater && later && inLater.time.getTime() <= later.time.getTime(), 'the retried row was stored before the later one');
  });

  test('relay - ferry dlq rejects an id that is not a UUID with exit code 2', async () => {
    const r = await ferry('dlq', 'retry', 'not-a-uuid', '--database-url', db.url, '--schema', db.schema);
    assert.equal(r.code, 2);
    assert.match(r.err.join('\n'), /must be a UUID/);
  });

  let poisonIdValue: string | undefined;
  function poisonId(): string {
    assert.ok(poisonIdValue ?? dead[0]?.id, 'the poison test ran first');
    poisonIdValue ??= dead[0]?.id;
    return poisonIdValue as string;
  }
});
