import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { type PooledConnection, quoteIdentifier } from '@ferry/core';
import {
  createIdempotency,
  fingerprintHash,
  IdempotencyConflictError,
  IdempotencyInProgressError,
  IdempotencyKeyError,
  type IdempotentResult,
  parseRetention,
  type RequestFingerprint,
} from '@ferry/idempotency';
import { createPublisher } from '@ferry/publisher';
import { createTestDatabase, type TestDatabase } from '@ferry/testkit';
import pg from 'pg';

let db: TestDatabase;
let s: string;

const order = (amount: number): RequestFingerprint => ({
  method: 'POST',
  path: '/orders',
  contentType: 'application/json',
  body: { amount, currency: 'EUR' },
});
/** The caller most tests run as. */
const ALICE = 'user-1';

async function count(table: string, where = 'true', values: unknown[] = []): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${s}.${table} WHERE ${where}`, values);
  return rows[0]?.n ?? -1;
}

before(async () => {
  db = await createTestDatabase({ prefix: 'idem_run', migrate: ['outbox', 'idempotency'], max: 20 });
  s = quoteIdentifier(db.schema);
  await db.pool.query(`CREATE TABLE ${s}.orders (id serial PRIMARY KEY, idem_key text NOT NULL, amount int NOT NULL)`);
});
after(async () => {
  await db?.close();
});

describe('idempotency - run()', () => {
  test('idempotency - the same request twice runs the operation once and replays the stored answer', async () => {
    const keys = createIdempotency({ schema: db.schema, scope: 'twice' });
    let executions = 0;
    const op = async (tx: PooledConnection) => {
      executions++;
      const { rows } = await tx.query<{ id: number }>(`INSERT INTO ${s}.orders (idem_key, amount) VALUES ('twice', 10) RETURNING id`);
      return { status: 201, body: { id: rows[0]?.id, amount: 10 }, headers: { Location: `/orders/${rows[0]?.id}` } };
    };
    const first = await keys.run(db.pool, { key: 'twice-1', principal: ALICE, fingerprint: order(10) }, op);
    const second = await keys.run(db.pool, { key: 'twice-1', principal: ALICE, fingerprint: { ...order(10), method: 'post' } }, op);
    assert.equal(executions, 1);
    assert.equal(await count('orders', "idem_key = 'twice'"), 1);
    assert.equal(first.replayed, false);
    assert.equal(second.replayed, true);
    assert.equal(second.status, 201);
    assert.deepEqual(second.body, first.body);
    assert.deepEqual(second.headers, first.headers);
  });

  test('idempotency - the same key with another body, path or content type is a conflict naming the key, never the stored answer', async () => {
    const keys = createIdempotency({ schema: db.schema, scope: 'conflict' });
    let executions = 0;
    const op = async () => {
      executions++;
      return { status: 201, body: { secret: 'first answer' } };
    };
    await keys.run(db.pool, { key: 'conflict-1', principal: ALICE, fingerprint: order(10) }, op);
    for (const other of [
      order(11),
      { ...order(10), path: '/refunds' },
      { ...order(10), path: '/orders?dry-run=1' },
      { ...order(10), contentType: 'application/x-www-form-urlencoded' },
      { ...order(10), contentType: null },
    ]) {
      await assert.rejects(keys.run(db.pool, { key: 'conflict-1', principal: ALICE, fingerprint: other }, op), (err: unknown) => {
        assert.ok(err instanceof IdempotencyConflictError);
        assert.match(err.message, /conflict-1/);
        assert.equal(err.key, 'conflict-1');
        return true;
      });
    }
    assert.equal(executions, 1);
    // The same key in another scope is another key.
    const elsewhere = createIdempotency({ schema: db.schema, scope: 'conflict-other-api' });
    const r = await elsewhere.run(db.pool, { key: 'conflict-1', principal: ALICE, fingerprint: order(11) }, op);
    assert.equal(r.replayed, false);
    assert.equal(executions, 2);
  });

  test('idempotency - an operation that throws rolls back its writes and releases the key, so a retry runs again', async () => {
    const keys = createIdempotency({ schema: db.schema, scope: 'throws' });
    let executions = 0;
    const op = async (tx: PooledConnection) => {
      executions++;
      await tx.query(`INSERT INTO ${s}.orders (idem_key, amount) VALUES ('throws', 5)`);
      if (executions === 1) throw new Error('payment provider timed out');
      return { status: 201, body: { ok: true } };
    };
    await assert.rejects(keys.run(db.pool, { key: 'throws-1', principal: ALICE, fingerprint: order(5) }, op), /payment provider timed out/);
    assert.equal(await count('orders', "idem_key = 'throws'"), 0);
    assert.equal(await count('idempotency_keys', "key = 'throws-1'"), 0);
    const retry = await keys.run(db.pool, { key: 'throws-1', principal: ALICE, fingerprint: order(5) }, op);
    assert.equal(retry.replayed, false);
    assert.equal(executions, 2);
    assert.equal(await count('orders', "idem_key = 'throws'"), 1);
  });

  test('idempotency - a 4xx answer is stored and replayed unless storeClientErrors is false', async () => {
    for (const storeClientErrors of [true, false]) {
      const keys = createIdempotency({ schema: db.schema, scope: `client-errors-${storeClientErrors}`, storeClientErrors });
      let executions = 0;
      const op = async () => {
        executions++;
        return { status: 402, body: { error: 'card declined', attempt: executions } };
      };
      const first = await keys.run(db.pool, { key: 'declined', principal: ALICE, fingerprint: order(99) }, op);
      const second = await keys.run(db.pool, { key: 'declined', principal: ALICE, fingerprint: order(99) }, op);
      assert.equal(first.status, 402);
      assert.equal(second.status, 402);
      if (storeClientErrors) {
        assert.equal(executions, 1);
        assert.equal(second.replayed, true);
        assert.deepEqual(second.body, { error: 'card declined', attempt: 1 });
      } else {
        assert.equal(executions, 2);
        assert.equal(second.replayed, false);
        assert.deepEqual(second.body, { error: 'card declined', attempt: 2 });
      }
    }
  });

  test('idempotency - 408, 409, 425 and 429 mean "try again": never stored, even with storeClientErrors, so a retry runs again', async () => {
    for (const status of [408, 409, 425, 429]) {
      const keys = createIdempotency({ schema: db.schema, scope: `retry-later-${status}`, storeClientErrors: true });
      const key = `retry-later-${status}`;
      let executions = 0;
      const op = async (tx: PooledConnection) => {
        executions++;
        await tx.query(`INSERT INTO ${s}.orders (idem_key, amount) VALUES ($1, 1)`, [key]);
        return executions === 1
          ? { status, body: { error: 'slow down' }, headers: { 'Retry-After': '1' } }
          : { status: 201, body: { ok: true } };
      };
      const first = await keys.run(db.pool, { key, principal: ALICE, fingerprint: order(7) }, op);
      assert.equal(first.status, status);
      assert.equal(await count('orders', 'idem_key = $1', [key]), 0, `${status}: its writes rolled back`);
      assert.equal(await count('idempotency_keys', 'key = $1', [key]), 0, `${status}: the key is released`);
      const second = await keys.run(db.pool, { key, principal: ALICE, fingerprint: order(7) }, op);
      assert.equal(second.status, 201, `${status}: the retry ran`);
      assert.equal(second.replayed, false);
      assert.equal(executions, 2);
      const third = await keys.run(db.pool, { key, principal: ALICE, fingerprint: order(7) }, op);
      assert.equal(third.replayed, true, `${status}: the executed answer is the one stored`);
      assert.equal(third.status, 201);
    }
  });

  test('idempotency - a 5xx answer is not stored: its writes roll back and a retry runs again', async () => {
    const keys = createIdempotency({ schema: db.schema, scope: 'server-errors' });
    let executions = 0;
    const op = async (tx: PooledConnection) => {
      executions++;
      await tx.query(`INSERT INTO ${s}.orders (idem_key, amount) VALUES ('5xx', 1)`);
      return executions === 1 ? { status: 503, body: { error: 'try later' } } : { status: 201, body: { ok: true } };
    };
    const first = await keys.run(db.pool, { key: '5xx', principal: ALICE, fingerprint: order(1) }, op);
    assert.equal(first.status, 503);
    assert.equal(first.replayed, false);
    assert.equal(await count('orders', "idem_key = '5xx'"), 0);
    assert.equal(await count('idempotency_keys', "key = '5xx'"), 0);
    const second = await keys.run(db.pool, { key: '5xx', principal: ALICE, fingerprint: order(1) }, op);
    assert.equal(second.status, 201);
    assert.equal(executions, 2);
    assert.equal(await count('orders', "idem_key = '5xx'"), 1);
  });

  test('idempotency - 50 simultaneous requests with one key in wait mode run once and all get the same answer', async () => {
    const keys = createIdempotency({ schema: db.schema, scope: 'storm-wait', onConcurrent: 'wait', waitMs: 20_000 });
    let executions = 0;
    const op = async (tx: PooledConnection) => {
      executions++;
      const { rows } = await tx.query<{ id: number }>(`INSERT INTO ${s}.orders (idem_key, amount) VALUES ('storm-wait', 7) RETURNING id`);
      await sleep(300); // keep the first one in progress while the others arrive
      return { status: 201, body: { id: rows[0]?.id, amount: 7 } };
    };
    const results = await Promise.all(
      Array.from({ length: 50 }, () => keys.run(db.pool, { key: 'storm', principal: ALICE, fingerprint: order(7) }, op)),
    );
    assert.equal(executions, 1);
    assert.equal(await count('orders', "idem_key = 'storm-wait'"), 1);
    assert.equal(results.filter((r) => !r.replayed).length, 1);
    for (const r of results) {
      assert.equal(r.status, 201);
      assert.deepEqual(r.body, results[0]?.body);
    }
  });

  test('idempotency - 50 simultaneous requests with one key in reject mode run once; the others replay or get in-progress', async () => {
    const keys = createIdempotency({ schema: db.schema, scope: 'storm-reject', onConcurrent: 'reject' });
    let executions = 0;
    const op = async (tx: PooledConnection) => {
      executions++;
      const { rows } = await tx.query<{ id: number }>(`INSERT INTO ${s}.orders (idem_key, amount) VALUES ('storm-reject', 8) RETURNING id`);
      await sleep(300);
      return { status: 201, body: { id: rows[0]?.id, amount: 8 } };
    };
    const settled = await Promise.allSettled(
      Array.from({ length: 50 }, () => keys.run(db.pool, { key: 'storm', principal: ALICE, fingerprint: order(8) }, op)),
    );
    assert.equal(executions, 1);
    assert.equal(await count('orders', "idem_key = 'storm-reject'"), 1);
    const answers = settled.filter((r): r is PromiseFulfilledResult<IdempotentResult> => r.status === 'fulfilled').map((r) => r.value);
    const rejected = settled.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    assert.ok(rejected.length > 0, 'some requests arrived while the first was running');
    for (const r of rejected) assert.ok(r.reason instanceof IdempotencyInProgressError, String(r.reason));
    assert.equal(answers.filter((a) => !a.replayed).length, 1);
    for (const a of answers) assert.deepEqual(a.body, answers[0]?.body);
    const late = await keys.run(db.pool, { key: 'storm', principal: ALICE, fingerprint: order(8) }, op);
    assert.equal(late.replayed, true);
    assert.deepEqual(late.body, answers[0]?.body);
  });

  test('idempotency - a duplicate that waits longer than waitMs gets in-progress, and replays once the first finishes', async () => {
    const keys = createIdempotency({ schema: db.schema, scope: 'wait-bound', waitMs: 200 });
    let executions = 0;
    const op = async () => {
      executions++;
      await sleep(1_000);
      return { status: 200, body: 'done' };
    };
    const first = keys.run(db.pool, { key: 'slow', principal: ALICE, fingerprint: order(3) }, op);
    await sleep(100);
    const started = Date.now();
    await assert.rejects(keys.run(db.pool, { key: 'slow', principal: ALICE, fingerprint: order(3) }, op), (err: unknown) => {
      assert.ok(err instanceof IdempotencyInProgressError);
      assert.equal(err.waitedMs, 200);
      return true;
    });
    const waited = Date.now() - started;
    assert.ok(waited >= 150 && waited < 900, `waited ${waited} ms`);
    assert.equal((await first).body, 'done');
    const replay = await keys.run(db.pool, { key: 'slow', principal: ALICE, fingerprint: order(3) }, op);
    assert.equal(replay.replayed, true);
    assert.equal(replay.body, 'done');
    assert.equal(executions, 1);
  });

  test("idempotency - the operation runs under the caller's lock_timeout, not the wait bound", async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 1, options: '-c lock_timeout=4321' });
    try {
      const keys = createIdempotency({ schema: db.schema, scope: 'lock-timeout', waitMs: 250 });
      const seen = await keys.run(pool, { key: 'lt', principal: ALICE, fingerprint: order(1) }, async (tx) => {
        const { rows } = await tx.query<{ v: string }>("SELECT current_setting('lock_timeout') AS v");
        return { status: 200, body: rows[0]?.v };
      });
      assert.equal(seen.body, '4321ms');
    } finally {
      await pool.end();
    }
  });

  test('idempotency - the key row and the publisher outbox event commit together or not at all', async () => {
    const keys = createIdempotency({ schema: db.schema, scope: 'outbox' });
    const publisher = createPublisher({ schema: db.schema, source: 'idempotency-test' });
    const place = (key: string, outcome: 'ok' | 'throw' | '500') =>
      keys.run(db.pool, { key, principal: ALICE, fingerprint: order(42) }, async (tx) => {
        await publisher.publish(tx, { subject: 'orders.placed', key: `order-${key}`, type: 'OrderPlaced', data: { key } });
        if (outcome === 'throw') throw new Error('crash after publish');
        return outcome === '500' ? { status: 500, body: { error: 'boom' } } : { status: 201, body: { key } };
      });
    await place('ob-ok', 'ok');
    await assert.rejects(place('ob-throw', 'throw'), /crash after publish/);
    await place('ob-500', '500');
    await place('ob-ok', 'ok'); // a replay publishes nothing more
    for (const [key, expected] of [
      ['ob-ok', 1],
      ['ob-throw', 0],
      ['ob-500', 0],
    ] as const) {
      assert.equal(await count('outbox', 'key = $1', [`order-${key}`]), expected, `outbox rows for ${key}`);
      assert.equal(await count('idempotency_keys', "scope = 'outbox' AND key = $1", [key]), expected, `key rows for ${key}`);
    }
  });

  test('idempotency - missing, empty, over-long and non-ASCII keys are refused before any SQL runs', async () => {
    const keys = createIdempotency({ schema: db.schema, scope: 'bad-keys' });
    let executions = 0;
    const op = async () => {
      executions++;
      return { status: 200 };
    };
    for (const key of [undefined, '', 'x'.repeat(256), 'tab\there', 'new\nline', 'clé', 42]) {
      await assert.rejects(
        keys.run(db.pool, { key: key as string, principal: ALICE, fingerprint: order(1) }, op),
        IdempotencyKeyError,
        `key ${JSON.stringify(key)}`,
      );
    }
    assert.equal(executions, 0);
    const longest = await keys.run(db.pool, { key: 'k'.repeat(255), principal: ALICE, fingerprint: order(1) }, op);
    assert.equal(longest.status, 200);
    assert.equal(executions, 1);
  });

  test('idempotency - retention parses minutes, hours and days and is never below one hour', () => {
    assert.equal(parseRetention('90m'), 90 * 60_000);
    assert.equal(parseRetention('24h'), 24 * 3_600_000);
    assert.equal(parseRetention('7d'), 7 * 86_400_000);
    assert.equal(parseRetention('1h'), 3_600_000);
    for (const bad of ['59m', '0h', '30s', '1 day', '', 1000, -1]) {
      assert.throws(() => createIdempotency({ retention: bad as string }), { name: 'ValidationError', field: 'retention' }, String(bad));
    }
    assert.equal(createIdempotency().options.retentionMs, 24 * 3_600_000);
    assert.throws(() => createIdempotency({ onConcurrent: 'queue' as 'wait' }), { field: 'onConcurrent' });
    assert.throws(() => createIdempotency({ waitMs: 0 }), { field: 'waitMs' });
    assert.throws(() => createIdempotency({ schema: 'Bad-Schema' }), { field: 'schema' });
  });

  test('idempotency - the fingerprint ignores body key order and method case but not values', () => {
    const a = fingerprintHash({ method: 'post', path: '/o', body: { a: 1, b: { c: [1, 2], d: 'x' } } });
    const b = fingerprintHash({ method: 'POST', path: '/o', body: { b: { d: 'x', c: [1, 2] }, a: 1 } });
    const c = fingerprintHash({ method: 'POST', path: '/o', body: { b: { d: 'x', c: [2, 1] }, a: 1 } });
    assert.ok(a.equals(b));
    assert.ok(!a.equals(c));
    assert.equal(a.length, 32);
  });
});
