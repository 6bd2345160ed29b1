import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  ConflictError,
  encodedSize,
  encodeEvent,
  type Queryable,
  quoteIdentifier,
  REPLAY_MSG_ID_EXTRA_BYTES,
  ValidationError,
  withTransaction,
} from '@ferry/core';
import { createTestDatabase, type TestDatabase, waitFor } from '@ferry/testkit';
import pg from 'pg';
import { createPublisher, type PublishInput } from './index.js';

let db: TestDatabase;
let s: string;
before(async () => {
  db = await createTestDatabase({ prefix: 'pub', max: 30 });
  s = quoteIdentifier(db.schema);
});
after(() => db.close());

const ev = (key: string, extra: Partial<PublishInput> = {}): PublishInput =>
  ({ subject: 'orders.placed', key, type: 'OrderPlaced', data: { key }, ...extra }) as PublishInput;

async function rows(key: string) {
  const r = await db.pool.query(
    `SELECT id::text, key, version::int, seq::text, subject, type, source, content_type, convert_from(data, 'UTF8') AS data, headers FROM ${s}.outbox o WHERE key = $1 ORDER BY o.seq`,
    [key],
  );
  return r.rows;
}
async function keyVersion(key: string): Promise<number | undefined> {
  const r = await db.pool.query(`SELECT version::int AS v FROM ${s}.key_versions WHERE key = $1`, [key]);
  return r.rows[0]?.v;
}

/** A Queryable that records statements: a stand-in of our own making for "no SQL ran". */
function recording(inner?: Queryable): Queryable & { statements: string[] } {
  const statements: string[] = [];
  return {
    statements,
    async query<R>(text: string, values?: unknown[]) {
      statements.push(text);
      if (!inner) throw new Error('no SQL should run');
      return inner.query<R>(text, values);
    },
  };
}

describe('publisher', () => {
  test('publisher - publish writes the event with every field and returns id, version and seq', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'orders-service' });
    const r = await withTransaction(db.pool, (tx) =>
      publisher.publish(
        tx,
        ev('k-basic', { headers: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'x-tenant': 't1' } }),
      ),
    );
    assert.equal(r.key, 'k-basic');
    assert.equal(r.version, 1n);
    assert.equal(r.existing, false);
    assert.equal(typeof r.seq, 'bigint');
    const [row] = await rows('k-basic');
    assert.equal(row.id, r.id);
    assert.equal(row.seq, r.seq.toString());
    assert.equal(row.source, 'orders-service');
    assert.equal(row.content_type, 'application/json');
    assert.deepEqual(JSON.parse(row.data), { key: 'k-basic' });
    assert.equal(row.headers['x-tenant'], 't1');
    assert.match(r.id, /^[0-9a-f]{8}-[0-9a-f]{4}-7/); // UUIDv7 by default
  });

  test('publisher - a rolled-back transaction leaves no event and no version bump', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    await withTransaction(db.pool, (tx) => publisher.publish(tx, ev('k-rb')));
    await assert.rejects(
      withTransaction(db.pool, async (tx) => {
        await publisher.publish(tx, ev('k-rb'));
        throw new Error('business rule failed');
      }),
      /business rule failed/,
    );
    assert.equal((await rows('k-rb')).length, 1);
    assert.equal(await keyVersion('k-rb'), 1);
    const next = await withTransaction(db.pool, (tx) => publisher.publish(tx, ev('k-rb')));
    assert.equal(next.version, 2n, 'no gap after a rollback');
  });

  test('publisher - 20 concurrent transactions on one key get versions 1..20 in commit order', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    const commitOrder: string[] = [];
    await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        withTransaction(db.pool, async (tx) => {
          await sleep(Math.floor(Math.random() * 30));
          const r = await publisher.publish(tx, ev('k-order', { data: { i } }));
          await sleep(Math.floor(Math.random() * 30));
          return r;
        }).then((r) => commitOrder.push(r.id)),
      ),
    );
    const stored = await rows('k-order');
    assert.deepEqual(
      stored.map((r) => r.version),
      Array.from({ length: 20 }, (_, i) => i + 1),
      'versions 1..20, no gap',
    );
    assert.deepEqual(
      stored.map((r) => r.id),
      commitOrder,
      'version order (and seq order) is commit order',
    );
  });

  test('publisher - the same id with the same content returns the stored event and writes nothing', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    const id = randomUUID();
    const first = await withTransaction(db.pool, (tx) => publisher.publish(tx, ev('k-idem', { id })));
    const again = await withTransaction(db.pool, (tx) => publisher.publish(tx, ev('k-idem', { id })));
    assert.equal(again.existing, true);
    assert.equal(again.seq, first.seq);
    assert.equal(again.version, first.version);
    assert.equal((await rows('k-idem')).length, 1);
    assert.equal(await keyVersion('k-idem'), 1, 'no version bump for a repeat');
  });

  test('publisher - the same id with other data is a conflict naming the id', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    const id = randomUUID();
    await withTransaction(db.pool, (tx) => publisher.publish(tx, ev('k-conf', { id })));
    await assert.rejects(
      withTransaction(db.pool, (tx) => publisher.publishMany(tx, [ev('k-conf-other'), ev('k-conf', { id, data: { changed: true } })])),
      (e: unknown) => e instanceof ConflictError && e.code === 'FERRY_CONFLICT' && e.message.includes(id) && e.eventId === id,
    );
    assert.equal((await rows('k-conf-other')).length, 0, 'nothing of the batch was written');
    assert.equal(await keyVersion('k-conf-other'), undefined);
  });

  test('publisher - two concurrent transactions with one id leave exactly one row', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    for (let round = 0; round < 5; round++) {
      const id = randomUUID();
      const key = `k-race-${round}`;
      const a = await db.pool.connect();
      const b = await db.pool.connect();
      try {
        await a.query('BEGIN');
        await b.query('BEGIN');
        const ra = await publisher.publish(a, ev(key, { id }));
        const pb = publisher.publish(b, ev(key, { id })).then(
          (r) => ({ ok: true as const, r }),
          (e: unknown) => ({ ok: false as const, e }),
        );
        await sleep(50); // b is now blocked on a's row
        await a.query('COMMIT');
        const outcome = await pb;
        if (outcome.ok) {
          assert.equal(outcome.r.id, ra.id);
          assert.equal(outcome.r.existing, true);
          await b.query('COMMIT');
        } else {
          assert.ok(outcome.e instanceof ConflictError, String(outcome.e));
          assert.match((outcome.e as Error).message, /roll it back/);
          await b.query('ROLLBACK');
        }
      } finally {
        a.release();
        b.release();
      }
      assert.equal((await rows(key)).length, 1);
      assert.equal(await keyVersion(key), 1, 'the loser left no version bump');
      const retry = await withTransaction(db.pool, (tx) => publisher.publish(tx, ev(key, { id })));
      assert.equal(retry.existing, true, 'a retry returns the stored event');
    }
  });

  test('publisher - a caller-supplied version already used by another id is a conflict', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    const r = await withTransaction(db.pool, (tx) =>
      publisher.publishMany(tx, [ev('k-ver', { version: 5 }), ev('k-ver', { version: 7n })]),
    );
    assert.deepEqual(
      r.map((x) => x.version),
      [5n, 7n],
    );
    await assert.rejects(
      withTransaction(db.pool, (tx) => publisher.publish(tx, ev('k-ver', { version: 5 }))),
      (e: unknown) => e instanceof ConflictError && /version/.test(e.message),
    );
    const auto = await withTransaction(db.pool, (tx) => publisher.publish(tx, ev('k-ver')));
    assert.equal(auto.version, 8n, 'automatic versions continue above explicit ones');
  });

  test('publisher - publishMany continues each key from its recorded version, interleaved keys in input order', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    await withTransaction(db.pool, (tx) => publisher.publish(tx, ev('k-cont-x')));
    const results = await withTransaction(db.pool, (tx) =>
      publisher.publishMany(tx, [ev('k-cont-x'), ev('k-cont-y'), ev('k-cont-x'), ev('k-cont-y'), ev('k-cont-x')]),
    );
    assert.deepEqual(
      results.map((r) => `${r.key}@${r.version}`),
      ['k-cont-x@2', 'k-cont-y@1', 'k-cont-x@3', 'k-cont-y@2', 'k-cont-x@4'],
    );
    const seqs = results.map((r) => r.seq);
    assert.deepEqual(
      seqs,
      [...seqs].sort((a, b) => (a < b ? -1 : 1)),
      'stored in input order',
    );
    assert.equal(await keyVersion('k-cont-x'), 4);
    assert.equal(await keyVersion('k-cont-y'), 2);
  });

  test('publisher - publishMany writes the whole batch in one round trip, versions consecutive per key', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    const events = Array.from({ length: 100 }, (_, i) => ev(`k-many-${i % 7}`, { data: { i } }));
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const rec = recording(client);
      const results = await publisher.publishMany(rec, events);
      await client.query('COMMIT');
      assert.equal(rec.statements.length, 1, 'one statement');
      assert.ok(!rec.statements.some((q) => /^\s*(BEGIN|COMMIT|ROLLBACK)/i.test(q)), 'never BEGIN/COMMIT on the caller connection');
      assert.deepEqual(
        results.map((r) => r.key),
        events.map((e) => e.key),
        'results in input order',
      );
      for (let k = 0; k < 7; k++) {
        const versions = results.filter((r) => r.key === `k-many-${k}`).map((r) => Number(r.version));
        assert.deepEqual(
          versions,
          versions.map((_, i) => i + 1),
        );
      }
      const seqs = results.map((r) => r.seq);
      assert.deepEqual(
        seqs,
        [...seqs].sort((x, y) => (x < y ? -1 : 1)),
        'seq follows input order',
      );
    } finally {
      client.release();
    }
  });

  test('publisher - the size limit is exact: a replay copy of exactly maxPayloadBytes is published, one byte more is refused', async () => {
    const max = 2048;
    const publisher = createPublisher({ schema: db.schema, source: 'svc', maxPayloadBytes: max });
    // Multi-byte text in the key and a header: the cheap bound counts them at 3 bytes a character, the check must not.
    const key = 'size-édge';
    const headers = { 'x-note': 'ü'.repeat(40) };
    const sizeOf = (n: number) =>
      encodedSize(
        encodeEvent({
          id: randomUUID(),
          key,
          version: 1n,
          subject: 'orders.placed',
          type: 'OrderPlaced',
          source: 'svc',
          time: new Date(),
          contentType: 'application/json',
          data: Buffer.from(JSON.stringify('x'.repeat(n))),
          headers,
        }),
      ) + REPLAY_MSG_ID_EXTRA_BYTES;
    const n = max - sizeOf(0);
    assert.equal(sizeOf(n), max);
    const published = await withTransaction(db.pool, (tx) => publisher.publish(tx, ev(key, { data: 'x'.repeat(n), headers })));
    assert.equal(published.version, 1n);
    await assert.rejects(
      withTransaction(db.pool, (tx) => publisher.publish(tx, ev(key, { data: 'x'.repeat(n + 1), headers }))),
      (e: unknown) => e instanceof ValidationError && e.field === 'event.data' && e.message.includes(`encodes to ${max + 1} bytes`),
    );
    assert.equal((await rows(key)).length, 1);
  });

  test('publisher - invalid events are refused with a ValidationError before any SQL', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc', maxPayloadBytes: 4096 });
    const cases: Array<[string, PublishInput | unknown, string]> = [
      ['event.subject', ev('k', { subject: 'orders.*' }), 'orders.*'],
      ['event.subject', ev('k', { subject: 'orders..placed' }), 'orders..placed'],
      ['event.subject', ev('k', { subject: 'orders placed' }), 'orders placed'],
      ['event.key', ev(''), 'non-empty'],
      ['event.key', ev('k'.repeat(257)), '256'],
      ['event.type', ev('k', { type: '' } as never), 'type'],
      ['event.data', ev('k', { data: { big: 1n } }), 'JSON'],
      ['event.data', ev('k', { data: undefined }), 'JSON'],
      ['event.data', ev('k', { data: 'x'.repeat(5000) }), 'maxPayloadBytes'],
      ['event.contentType', ev('k', { data: new Uint8Array([1]) }), 'contentType'],
      ['event.headers.ce-id', ev('k', { headers: { 'ce-id': 'x' } }), 'reserved'],
      ['event.headers.Nats-Msg-Id', ev('k', { headers: { 'Nats-Msg-Id': 'x' } }), 'reserved'],
      ['event.id', ev('k', { id: 'not-a-uuid' }), 'not-a-uuid'],
      ['event.version', ev('k', { version: 0 }), 'positive'],
      ['event.time', ev('k', { time: new Date('nope') }), 'Date'],
    ];
    for (const [field, input, fragment] of cases) {
      const rec = recording();
      await assert.rejects(
        publisher.publish(rec, input as PublishInput),
        (e: unknown) => e instanceof ValidationError && e.code === 'FERRY_INVALID' && e.field === field && e.message.includes(fragment),
        `${field} ${fragment}`,
      );
      assert.equal(rec.statements.length, 0, `no SQL for ${field}`);
    }
    const rec = recording();
    await assert.rejects(
      publisher.publishMany(rec, [
        ev('a', { id: '0190f2c4-6f2e-7c3a-9a47-1b2c3d4e5f60' }),
        ev('b', { id: '0190f2c4-6f2e-7c3a-9a47-1b2c3d4e5f60' }),
      ]),
      /twice/,
    );
    await assert.rejects(publisher.publishMany(rec, [ev('a', { version: 1 }), ev('a')]), /with and without a version/);
    assert.equal(rec.statements.length, 0);
  });

  test('publisher - bad options fail at construction naming the option', () => {
    assert.throws(
      () => createPublisher({ source: '' }),
      (e: unknown) => e instanceof ValidationError && e.field === 'source',
    );
    assert.throws(
      () => createPublisher({ source: 's', schema: 'x"; drop table t; --' }),
      (e: unknown) => e instanceof ValidationError && e.field === 'schema',
    );
    assert.throws(() => createPublisher({ source: 's', maxPayloadBytes: 10 }), /maxPayloadBytes/);
  });

  test('publisher - notify (the default) sends one notification per transaction while a relay waits, none when no relay waits or when off', async () => {
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    const got: string[] = [];
    listener.on('notification', (n) => got.push(n.channel));
    await listener.query(`LISTEN ${quoteIdentifier(`ferry_${db.schema}`)}`);
    const s = quoteIdentifier(db.schema);
    const waiting = (until: string) =>
      db.pool.query(
        `INSERT INTO ${s}.relay_waiting (instance, until) VALUES ('test', ${until}) ON CONFLICT (instance) DO UPDATE SET until = excluded.until`,
      );
    try {
      const byDefault = createPublisher({ schema: db.schema, source: 'svc' });
      assert.equal(byDefault.options.notify, true);
      // No relay waits (none recorded, then one whose record expired): no NOTIFY, the relay is polling.
      await withTransaction(db.pool, (tx) => byDefault.publish(tx, ev('k-n0')));
      await waiting(`now() - interval '1 second'`);
      await withTransaction(db.pool, (tx) => byDefault.publish(tx, ev('k-n0b')));
      await sleep(200);
      assert.deepEqual(got, []);
      // A relay waits: one NOTIFY per transaction, however many events it publishes.
      await waiting(`now() + interval '1 minute'`);
      await withTransaction(db.pool, async (tx) => {
        await byDefault.publish(tx, ev('k-n1'));
        await byDefault.publish(tx, ev('k-n2'));
        await byDefault.publishMany(tx, [ev('k-n3'), ev('k-n4')]);
      });
      await waitFor(() => got.length >= 1, { what: 'a notification' });
      const quiet = createPublisher({ schema: db.schema, source: 'svc', notify: false });
      await withTransaction(db.pool, (tx) => quiet.publish(tx, ev('k-n5')));
      await sleep(200);
      assert.deepEqual(got, [`ferry_${db.schema}`]);
    } finally {
      await db.pool.query(`DELETE FROM ${s}.relay_waiting`);
      await listener.end();
    }
  });
});
