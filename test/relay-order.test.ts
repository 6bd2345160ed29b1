// Guarantee 2 under poison (issue 12): a row that fails, whatever makes it fail, blocks exactly its key —
// every later row of that key, in this batch and every later one — and nothing else. Each test reads the
// stream directly; none relies on the relay's own account of what it sent.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { quoteIdentifier, RELAY_PROTOCOL, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { claimBatchSql, createRelay, type Relay, type RelayOptions } from '@ferry/relay';
import { laneCursors } from '@ferry/relay/testing';
import { createTestDatabase, createTestStream, NatsServer, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import { markPublished, setFailed } from './delivery-state.js';
import { ferry } from './ops-helpers.js';
import { publishEvents, readStream } from './relay-helpers.js';

describe('relay per-key order in the stream under poison', () => {
  let nats: NatsServer;
  let stream: TestStream;
  const open: Array<{ relay?: Relay; db: TestDatabase }> = [];

  before(async () => {
    // A private server with a small max_payload, so that an event can be too large for it.
    nats = await NatsServer.start({ config: 'max_payload: 4096' });
    stream = await createTestStream({ servers: nats.url, prefix: 'order' });
  });

  after(async () => {
    for (const o of open) {
      await o.relay?.stop();
      await o.db.close();
    }
    await stream?.close();
    await nats?.stop();
  });

  /** A one-lane outbox (every key in the same lane) and a relay on it with `options`. */
  async function setup(prefix: string, options: Partial<RelayOptions> = {}) {
    const db = await createTestDatabase({ prefix, lanes: 1 });
    const entry: { relay?: Relay; db: TestDatabase } = { db };
    open.push(entry);
    const start = async () => {
      entry.relay = createRelay({
        databaseUrl: db.url,
        schema: db.schema,
        nats: { servers: nats.url },
        maintenance: false,
        listen: false,
        pollIntervalMs: 100,
        ...options,
      });
      await entry.relay.start();
      return entry.relay;
    };
    return { db, s: quoteIdentifier(db.schema), entry, start };
  }

  /** Key `key`: v1 from `first`, then v2..v12 small on the test stream. Returns the ids in version order. */
  async function keyWithBadHead(db: TestDatabase, key: string, first: { subject: string; data: unknown }): Promise<string[]> {
    const publisher = createPublisher({ schema: db.schema, source: 'order-test', maxPayloadBytes: 65_536 });
    const ids: string[] = [];
    const head = await withTransaction(db.pool, (tx) => publisher.publish(tx, { key, type: 'Head', ...first }));
    ids.push(head.id);
    for (let v = 2; v <= 12; v++) {
      const r = await withTransaction(db.pool, (tx) =>
        publisher.publish(tx, { subject: `${stream.prefix}.orders`, key, type: 'Later', data: { v } }),
      );
      ids.push(r.id);
    }
    return ids;
  }

  async function versionsInStream(key: string): Promise<bigint[]> {
    return (await readStream(stream.nc, stream.name)).filter((e) => e.key === key).map((e) => e.version);
  }

  async function waitDead(db: TestDatabase, id: string): Promise<{ attempts: number; last_error: string }> {
    const s = quoteIdentifier(db.schema);
    return waitFor(
      async () => {
        const { rows } = await db.pool.query<{ attempts: number; last_error: string }>(
          `SELECT attempts, last_error FROM ${s}.outbox_events WHERE id = $1 AND dead_at IS NOT NULL`,
          [id],
        );
        return rows[0];
      },
      { timeoutMs: 20_000, what: `event ${id} to be dead` },
    );
  }

  async function waitPublished(db: TestDatabase, ids: string[], what: string): Promise<void> {
    const s = quoteIdentifier(db.schema);
    await waitFor(
      async () => {
        const { rows } = await db.pool.query(`SELECT 1 FROM ${s}.outbox_events WHERE id = ANY ($1::uuid[]) AND published_at IS NULL`, [
          ids,
        ]);
        return rows.length === 0;
      },
      { timeoutMs: 20_000, what },
    );
  }

  /** Discards the dead head, then the key's later rows must all follow, in order, each once. */
  async function discardAndExpectOrder(db: TestDatabase, key: string, ids: string[]): Promise<void> {
    const r = await ferry(['dlq', 'discard', ids[0] as string, '--yes', '--database-url', db.url, '--schema', db.schema]);
    assert.equal(r.code, 0, r.err);
    await waitPublished(db, ids.slice(1), `the rows behind the discarded head of ${key}`);
    assert.deepEqual(await versionsInStream(key), [2n, 3n, 4n, 5n, 6n, 7n, 8n, 9n, 10n, 11n, 12n]);
  }

  test('relay order - a head refused before sending (over max_payload) holds every later row of its key, across batches', async () => {
    const { db, start } = await setup('order_refused', { batchSize: 5 });
    const ids = await keyWithBadHead(db, 'refused', { subject: `${stream.prefix}.orders`, data: { blob: 'x'.repeat(8000) } });
    const others = await publishEvents(db.pool, db.schema, stream.prefix, 60, { keys: 20, keyPrefix: 'ok-refused-' });
    await start();
    const dead = await waitDead(db, ids[0] as string);
    assert.match(dead.last_error, /^max_payload:/);
    await waitPublished(db, others, 'the other keys');
    await sleep(500); // several more claims of the lane
    assert.deepEqual(await versionsInStream('refused'), [], 'no later version of the key reached the stream');
    await discardAndExpectOrder(db, 'refused', ids);
  });

  test('relay order - a head no stream binds (no responders) holds its key while it retries and after it is dead', async () => {
    const { db, start } = await setup('order_unbound', { backoffBaseMs: 100, backoffMaxMs: 200, maxAttempts: 4 });
    const ids = await keyWithBadHead(db, 'unbound', { subject: 'order-nowhere.x', data: { v: 1 } });
    const others = await publishEvents(db.pool, db.schema, stream.prefix, 60, { keys: 20, keyPrefix: 'ok-unbound-' });
    await start();
    await waitPublished(db, others, 'the other keys');
    assert.deepEqual(await versionsInStream('unbound'), [], 'nothing of the key while its head backs off');
    const dead = await waitDead(db, ids[0] as string);
    assert.equal(dead.attempts, 4);
    // Issue 29: the reason names the cause and the fix, not nats.js's bare "no responders: 'subject'".
    assert.match(
      dead.last_error,
      /^no_responders: no stream binds subject order-nowhere\.x; add it to a stream \(ferry streams ensure STREAM=order-nowhere\.x\) or discard the event \(ferry dlq discard\)/,
    );
    assert.deepEqual(await versionsInStream('unbound'), [], 'nothing of the key after its head is dead');
    await discardAndExpectOrder(db, 'unbound', ids);
  });

  test('relay order - a head the stream rejects (over max_msg_size) holds every later row of its key', async () => {
    const small = await createTestStream({ servers: nats.url, prefix: 'ordersmall' });
    try {
      await small.jsm.streams.update(small.name, { subjects: [`${small.prefix}.>`], max_msg_size: 1024 });
      const { db, start } = await setup('order_rejected');
      const ids = await keyWithBadHead(db, 'rejected', { subject: `${small.prefix}.big`, data: { blob: 'y'.repeat(2000) } });
      await start();
      const dead = await waitDead(db, ids[0] as string);
      assert.equal(dead.attempts, 1, 'a message the stream can never take is dead at once');
      assert.match(dead.last_error, /^max_payload:/);
      await sleep(500);
      assert.deepEqual(await versionsInStream('rejected'), []);
      await discardAndExpectOrder(db, 'rejected', ids);
    } finally {
      await small.close();
    }
  });

  test('relay order - one unroutable row never opens the NATS circuit: healthy keys keep flowing', async () => {
    const { db, entry, start } = await setup('order_breaker', {
      backoffBaseMs: 100,
      backoffMaxMs: 300,
      breakerCooldownMs: 2000,
      maxAttempts: 1000,
    });
    const publisher = createPublisher({ schema: db.schema, source: 'order-test' });
    const unroutable = await withTransaction(db.pool, (tx) =>
      publisher.publish(tx, { subject: 'order-nowhere.u', key: 'unroutable', type: 'T', data: 1 }),
    );
    const relay = await start();
    const circuit: string[] = [];
    relay.on('relay:circuit', (e) => circuit.push(e.state));
    // Healthy keys once a second for four seconds; between them the unroutable row retries alone, every
    // few hundred ms: alone in its batches, it must still not count as a NATS failure.
    const healthy: string[] = [];
    for (let round = 0; round < 5; round++) {
      healthy.push(...(await publishEvents(db.pool, db.schema, stream.prefix, 10, { keys: 10, keyPrefix: `ok-${round}-` })));
      await sleep(1000);
    }
    await waitPublished(db, healthy, 'every healthy event');
    const { rows } = await db.pool.query<{ attempts: number }>(
      `SELECT attempts FROM ${quoteIdentifier(db.schema)}.outbox_events WHERE id = $1`,
      [unroutable.id],
    );
    assert.ok((rows[0]?.attempts ?? 0) >= 5, `the unroutable row kept retrying on its own (${rows[0]?.attempts} attempts)`);
    assert.deepEqual(circuit, [], 'the circuit never left closed');
    assert.match(await (entry.relay as Relay).metrics(), /ferry_circuit_state 0/);
    assert.match(await (entry.relay as Relay).metrics(), /ferry_blocked_keys 1/);
  });

  test('relay order - a claim skips a blocked key with one probe however many rows wait behind it', async (t) => {
    const { db, s } = await setup('order_claimcost');
    // Rows the claim reads from the outbox and its pending table (outbox migration 000015: the walk is
    // on outbox_pending, the event row read for the rows claimed; every scan node's rows times its
    // loops, and the rows its filters dropped: a count, not a time, and unlike buffers not moved by the
    // index's depth): 200 other keys, without and with 50,000 rows of one key waiting behind its dead
    // head, all in the one lane and ahead of the others in seq order.
    const rowsRead = async () => {
      interface PlanNode {
        'Relation Name'?: string;
        'Actual Rows': number;
        'Actual Loops': number;
        'Rows Removed by Filter'?: number;
        Plans?: PlanNode[];
      }
      const { rows } = await db.pool.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(
        `EXPLAIN (ANALYZE, FORMAT JSON) ${claimBatchSql(s).replaceAll('$1', "'{0}'").replaceAll('$2', '\'{""}\'').replaceAll('$3', "'{}'").replaceAll('$4', '500').replaceAll('$5', '5000').replaceAll('$6', '1048576').replaceAll('$7', '67108864').replaceAll('$8', "'t'")}`,
      );
      const byRelation = new Map<string, number>();
      const sum = (n: PlanNode | undefined): number => {
        if (n === undefined) return 0;
        const relation = n['Relation Name'];
        const read =
          relation === 'outbox' || relation === 'outbox_pending'
            ? (n['Actual Rows'] + (n['Rows Removed by Filter'] ?? 0)) * n['Actual Loops']
            : 0;
        if (relation !== undefined) byRelation.set(relation, (byRelation.get(relation) ?? 0) + read);
        return read + (n.Plans ?? []).reduce((a, c) => a + sum(c), 0);
      };
      const total = sum(rows[0]?.['QUERY PLAN'][0]?.Plan);
      t.diagnostic(`rows read by relation: ${JSON.stringify(Object.fromEntries(byRelation))}`);
      return total;
    };
    // The claim walks only lanes its caller ('t' here) holds with an unexpired lease.
    // An owner with a heartbeat the relay floor admits (outbox migration 000013), expired: not a live instance.
    await db.pool.query(
      `INSERT INTO ${s}.relay_instances (instance, application_name, backend_pid, seen_at, expires_at, release, protocol)
       VALUES ('t', 't', 0, now(), now(), 'test', ${RELAY_PROTOCOL})`,
    );
    await db.pool.query(`UPDATE ${s}.relay_leases SET owner = 't', expires_at = now() + interval '1 hour' WHERE lane = 0`);
    const others = `INSERT INTO ${s}.outbox (id, key, version, subject, type, source, content_type, data, occurred_at)
      SELECT gen_random_uuid(), 'other-' || g, 1, 'x.y', 'T', 'test', 'application/json', '\\x7b7d', now() FROM generate_series(1, 200) g`;
    // Without: the same 50,000 rows already published (a table of the same size, so the planner
    // takes the same paths), with: pending behind the dead head.
    const hot = async (published: boolean) => {
      await db.pool.query(`INSERT INTO ${s}.outbox (id, key, version, subject, type, source, content_type, data, occurred_at)
        SELECT gen_random_uuid(), 'hot', g, 'x.y', 'T', 'test', 'application/json', '\\x7b7d', now()
          FROM generate_series(1, 50000) g`);
      // The head dead at its first attempt; then, without, every row of the key published.
      await setFailed(db.pool, db.schema, `o.key = 'hot' AND o.version = 1`, [], { attempts: 1, dead: true });
      if (published) await markPublished(db.pool, db.schema, `o.key = 'hot'`);
    };
    const vacuum = () => db.pool.query(`VACUUM ANALYZE ${s}.outbox, ${s}.outbox_pending, ${s}.outbox_published`);
    await hot(true);
    await db.pool.query(others);
    await vacuum();
    const unblocked = await rowsRead();
    await db.pool.query(`DELETE FROM ${s}.outbox`);
    await hot(false);
    await db.pool.query(others);
    await vacuum();
    const blocked = await rowsRead();
    assert.ok(
      unblocked >= 400 && unblocked <= 1000,
      `the claim read ${unblocked} rows for 200 keys of one row each (a probe, a head, a row)`,
    );
    t.diagnostic(`the claim read ${unblocked} outbox and outbox_pending rows for 200 keys, ${blocked} with 50,000 rows behind a dead head`);
    assert.ok(blocked <= unblocked + 50, `the claim read ${blocked} rows with the blocked key, ${unblocked} without`);
    const claimed = await db.pool.query<{ key: string }>(claimBatchSql(s), [[0], [''], [], 500, 5000, 1_048_576, 67_108_864, 't']);
    assert.equal(claimed.rows.length, 200, 'every other key is claimed');
    assert.ok(!claimed.rows.some((r) => r.key === 'hot'), 'nothing of the blocked key');
  });

  test("relay order - a claim walks a lane's keys from after its cursor, wrapping around, and the next cursor is the last key walked", async () => {
    const { db, s } = await setup('order_walk');
    await db.pool.query(
      `INSERT INTO ${s}.relay_instances (instance, application_name, backend_pid, seen_at, expires_at, release, protocol)
       VALUES ('t', 't', 0, now(), now(), 'test', ${RELAY_PROTOCOL})`,
    );
    await db.pool.query(`UPDATE ${s}.relay_leases SET owner = 't', expires_at = now() + interval '1 hour' WHERE lane = 0`);
    await db.pool.query(`INSERT INTO ${s}.outbox (id, key, version, subject, type, source, content_type, data, occurred_at)
      SELECT gen_random_uuid(), 'k' || g, v, 'x.y', 'T', 'test', 'application/json', '\\x7b7d', now()
        FROM generate_series(0, 4) g, generate_series(1, 2) v`);
    const claim = (after: string, keys: number) =>
      db.pool.query<{ key: string; version: string; lane: number; walk_step: number }>(claimBatchSql(s), [
        [0],
        [after],
        [],
        keys,
        100,
        1_048_576,
        67_108_864,
        't',
      ]);
    // After k2: k3, k4, then around to k0, k1 and k2 itself; each key's rows from its head.
    const all = await claim('k2', 5);
    const steps = Object.fromEntries(all.rows.map((r) => [r.key, r.walk_step]));
    assert.deepEqual(steps, { k3: 1, k4: 2, k0: 3, k1: 4, k2: 5 });
    assert.deepEqual(
      all.rows.filter((r) => r.key === 'k0').map((r) => r.version),
      ['1', '2'],
    );
    // The next cursor is k2 (the last key walked), not k4 (the greatest key claimed).
    assert.equal(laneCursors(all.rows).get(0), 'k2');
    // Three keys from after k3: k4, k0, k1; the next claim starts after k1.
    const some = await claim('k3', 3);
    assert.deepEqual([...new Set(some.rows.map((r) => r.key))].sort(), ['k0', 'k1', 'k4']);
    assert.equal(laneCursors(some.rows).get(0), 'k1');
  });

  test('relay order - ferry status shows a blocked key with its reason and the rows waiting behind it', async () => {
    const { db, start } = await setup('order_status');
    const ids = await keyWithBadHead(db, 'stuck', { subject: `${stream.prefix}.orders`, data: { blob: 'z'.repeat(8000) } });
    await start();
    await waitDead(db, ids[0] as string);
    const r = await ferry(['status', '--json', '--database-url', db.url, '--schema', db.schema]);
    assert.equal(r.code, 0, r.err);
    const report = r.json<{ blockedKeys: number; blocked: Array<Record<string, unknown>> }>();
    assert.equal(report.blockedKeys, 1);
    assert.equal(report.blocked[0]?.key, 'stuck');
    assert.equal(report.blocked[0]?.id, ids[0]);
    assert.equal(report.blocked[0]?.state, 'dead');
    assert.equal(report.blocked[0]?.waiting, 11);
    assert.match(String(report.blocked[0]?.reason), /^max_payload:/);
    const text = await ferry(['status', '--database-url', db.url, '--schema', db.schema]);
    assert.match(text.out, /blocked key stuck: .*dead.*11 events wait behind it/);
    const list = await ferry(['dlq', 'list', '--json', '--database-url', db.url, '--schema', db.schema]);
    const listed = list.json<Array<{ id: string; waiting: number }>>();
    assert.deepEqual(
      listed.map((x) => [x.id, x.waiting]),
      [[ids[0], 11]],
    );
  });
  test('relay order - keys that array literals, collations and cursors could trip on go out in order, each once', async () => {
    // batchSize 2: many claims, so the lane cursor moves across these keys and the in-flight key list holds them.
    const { db, start } = await setup('order_oddkeys', { batchSize: 2 });
    const publisher = createPublisher({ schema: db.schema, source: 'order-test' });
    const keys = ['NULL', 'a,b', '{x}', 'q"uote', 'back\\slash', 'ünï-キー', 'mid space', 'Z', 'a', `long-${'k'.repeat(250)}`];
    const ids: string[] = [];
    for (let v = 1; v <= 3; v++) {
      for (const key of keys) {
        const r = await withTransaction(db.pool, (tx) =>
          publisher.publish(tx, { subject: `${stream.prefix}.odd`, key, type: 'Odd', data: { v } }),
        );
        ids.push(r.id);
      }
    }
    await start();
    await waitPublished(db, ids, 'every odd key');
    const events = (await readStream(stream.nc, stream.name)).filter((e) => ids.includes(e.id));
    assert.equal(events.length, ids.length, 'each event once');
    for (const key of keys) {
      assert.deepEqual(
        events.filter((e) => e.key === key).map((e) => e.version),
        [1n, 2n, 3n],
        `key ${JSON.stringify(key)} in order`,
      );
    }
  });
});
