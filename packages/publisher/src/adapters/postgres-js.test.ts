import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { ConflictError, type Queryable, quoteIdentifier, ValidationError, withTransaction } from '@ferry/core';
import { createTestDatabase, type TestDatabase, waitFor } from '@ferry/testkit';
import { sql as dsql } from 'drizzle-orm';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import postgres from 'postgres';
import { createPublisher, type PublishInput } from '../index.js';
import { fromDrizzle } from './drizzle.js';
import { fromPostgresJs } from './postgres-js.js';

let db: TestDatabase;
let s: string;
/** Statements postgres.js built, from its `debug` hook: what reached the server. */
const sent: string[] = [];
/** Left with postgres.js's default serializers: the adapter must not depend on them. */
let sql: postgres.Sql;
/** Its own instance: drizzle() rewrites the JSON and date serializers of the client it is given. */
let sqlForDrizzle: postgres.Sql;

before(async () => {
  db = await createTestDatabase({ prefix: 'pgjs', max: 4 });
  s = quoteIdentifier(db.schema);
  await db.pool.query(`CREATE TABLE ${s}.orders (id text PRIMARY KEY)`);
  const options = { max: 20, idle_timeout: 2, onnotice: () => {}, debug: (_: number, query: string) => sent.push(query) };
  sql = postgres(db.url, options);
  sqlForDrizzle = postgres(db.url, options);
});
after(async () => {
  await Promise.all([sql.end(), sqlForDrizzle.end()]);
  await db.close();
});

/** One way of running `fn` inside a transaction that commits when it resolves and rolls back when it throws. */
type Path = { name: string; run<T>(fn: (tx: Queryable, insertOrder: (id: string) => Promise<void>) => Promise<T>): Promise<T> };

const postgresJsBegin: Path = {
  name: 'postgres.js sql.begin',
  run: <T>(fn: (tx: Queryable, insertOrder: (id: string) => Promise<void>) => Promise<T>) =>
    sql.begin((tx) =>
      fn(fromPostgresJs(tx), async (id) => void (await tx`INSERT INTO ${tx(db.schema)}.orders (id) VALUES (${id})`)),
    ) as Promise<T>,
};
const postgresJsReserved: Path = {
  name: 'postgres.js reserved connection',
  async run(fn) {
    const r = await sql.reserve();
    try {
      await r`begin`;
      try {
        const result = await fn(fromPostgresJs(r), async (id) => void (await r`INSERT INTO ${r(db.schema)}.orders (id) VALUES (${id})`));
        await r`commit`;
        return result;
      } catch (err) {
        await r`rollback`;
        throw err;
      }
    } finally {
      r.release();
    }
  },
};
const drizzleOnPostgresJs: Path = {
  name: 'Drizzle on postgres.js',
  run: (fn) =>
    drizzlePostgresJs(sqlForDrizzle).transaction((tx) =>
      fn(fromDrizzle(tx), async (id) => void (await tx.execute(dsql`INSERT INTO ${dsql.raw(s)}.orders (id) VALUES (${id})`))),
    ),
};
const nodePostgres: Path = {
  name: 'node-postgres',
  run: (fn) =>
    withTransaction(db.pool, (tx) => fn(tx, async (id) => void (await tx.query(`INSERT INTO ${s}.orders (id) VALUES ($1)`, [id])))),
};
const drizzleOnNodePostgres: Path = {
  name: 'Drizzle on node-postgres',
  run: (fn) =>
    drizzlePg(db.pool).transaction((tx) =>
      fn(fromDrizzle(tx), async (id) => void (await tx.execute(dsql`INSERT INTO ${dsql.raw(s)}.orders (id) VALUES (${id})`))),
    ),
};
const NEW_PATHS = [postgresJsBegin, postgresJsReserved, drizzleOnPostgresJs];

const ev = (key: string, extra: Partial<PublishInput> = {}): PublishInput =>
  ({ subject: 'orders.placed', key, type: 'OrderPlaced', data: { key }, ...extra }) as PublishInput;

async function state(key: string) {
  const o = await db.pool.query(`SELECT 1 FROM ${s}.orders WHERE id = $1`, [key]);
  const e = await db.pool.query(`SELECT version::int FROM ${s}.outbox WHERE key = $1 ORDER BY seq`, [key]);
  return { order: o.rowCount, events: e.rows.map((r) => r.version) };
}

/** Every column the publisher writes, as PostgreSQL's own text (bytea as hex, jsonb canonical, time to the microsecond in UTC). */
async function storedRows(ids: string[]) {
  const r = await db.pool.query(
    `SELECT id::text, key, version::text, lane::text, subject, type, source, content_type, encode(data, 'hex') AS data,
            headers::text AS headers, to_char(occurred_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS occurred_at
       FROM ${s}.outbox WHERE id = ANY ($1::uuid[]) ORDER BY array_position($1::uuid[], id)`,
    [ids],
  );
  return r.rows;
}

describe('publisher on postgres.js', () => {
  // The schema is known only once `before` has run.
  const pub = () => createPublisher({ schema: db.schema, source: 'svc' });

  for (const path of NEW_PATHS) {
    test(`postgres.js - ${path.name}: the event exists iff the transaction commits`, async () => {
      const key = `commit-${path.name}`;
      await path.run(async (tx, insertOrder) => {
        await insertOrder(key);
        await pub().publishMany(tx, [ev(key), ev(key)]);
      });
      assert.deepEqual(await state(key), { order: 1, events: [1, 2] });
      const rolledBack = `rollback-${path.name}`;
      await assert.rejects(
        path.run(async (tx, insertOrder) => {
          await insertOrder(rolledBack);
          await pub().publish(tx, ev(rolledBack));
          throw new Error('business rule failed');
        }),
        /business rule failed/,
      );
      assert.deepEqual(await state(rolledBack), { order: 0, events: [] });
    });

    test(`postgres.js - ${path.name}: 20 concurrent transactions on one key get versions 1..20 in commit order`, async () => {
      const key = `order-${path.name}`;
      const commitOrder: string[] = [];
      await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          path
            .run(async (tx) => {
              await sleep(Math.floor(Math.random() * 30));
              const r = await pub().publish(tx, ev(key, { data: { i } }));
              await sleep(Math.floor(Math.random() * 30));
              return r;
            })
            .then((r) => commitOrder.push(r.id)),
        ),
      );
      const stored = await db.pool.query(`SELECT id::text, version::int FROM ${s}.outbox WHERE key = $1 ORDER BY seq`, [key]);
      assert.deepEqual(
        stored.rows.map((r) => r.version),
        Array.from({ length: 20 }, (_, i) => i + 1),
        'versions 1..20, no gap',
      );
      assert.deepEqual(
        stored.rows.map((r) => r.id),
        commitOrder,
        'version order (and seq order) is commit order',
      );
    });

    test(`postgres.js - ${path.name}: publishMany of 100 events is one statement`, async () => {
      const events = Array.from({ length: 100 }, (_, i) => ev(`many-${path.name}-${i % 10}`, { data: { i } }));
      const results = await path.run(async (tx) => {
        sent.length = 0;
        const r = await pub().publishMany(tx, events);
        assert.deepEqual(sent, [sent[0]], 'one statement reached the server');
        assert.match(sent[0] ?? '', /publish_events\(/);
        return r;
      });
      assert.equal(results.length, 100);
      assert.deepEqual(
        results.map((r) => [r.key, Number(r.version)]),
        events.map((e, i) => [e.key, Math.floor(i / 10) + 1]),
        'results in input order, versions per key',
      );
      assert.deepEqual(
        (await state(`many-${path.name}-3`)).events,
        Array.from({ length: 10 }, (_, i) => i + 1),
      );
    });

    test(`postgres.js - ${path.name}: bad input is a ValidationError before any statement, and the transaction goes on`, async () => {
      const key = `bad-${path.name}`;
      const id = randomUUID();
      await path.run(async (tx, insertOrder) => {
        await insertOrder(key);
        sent.length = 0;
        await assert.rejects(pub().publish(tx, ev(key, { subject: 'orders placed' })), ValidationError);
        await assert.rejects(pub().publishMany(tx, [ev(key, { id }), ev(key, { id })]), ValidationError);
        await assert.rejects(pub().publish(tx, ev(key, { data: () => 1 })), ValidationError);
        assert.deepEqual(sent, [], 'nothing reached the server');
      });
      assert.deepEqual(await state(key), { order: 1, events: [] }, 'the business write committed, no event');
    });
  }

  // Drizzle wraps driver errors in DrizzleQueryError; the adapter hands the publisher the driver's own.
  for (const path of [...NEW_PATHS, drizzleOnNodePostgres]) {
    test(`postgres.js - ${path.name}: a concurrent publish of the same id is a ConflictError`, async () => {
      const id = randomUUID();
      const key = `conflict-${path.name}`;
      let published = () => {};
      const firstPublished = new Promise<void>((resolve) => {
        published = resolve;
      });
      let commit = () => {};
      const firstMayCommit = new Promise<void>((resolve) => {
        commit = resolve;
      });
      const first = path.run(async (tx) => {
        await pub().publish(tx, ev(key, { id }));
        published();
        await firstMayCommit;
      });
      await firstPublished;
      // Settled into a value at once: it may fail before `first` has returned.
      const second = path
        .run((tx) => pub().publish(tx, ev(key, { id, data: { other: true } })))
        .then(
          () => undefined,
          (err: unknown) => err,
        );
      await waitFor(async () => (await lockWaiters()) > 0, { what: 'the second publish to wait for the first transaction' });
      commit();
      await first;
      const err = await second;
      assert.ok(err instanceof ConflictError, `a ConflictError, got ${String(err)}`);
      assert.match(err.message, /concurrent transaction/);
      assert.deepEqual((await state(key)).events, [1]);
    });
  }

  test('postgres.js - the outbox row is byte-identical whichever driver or adapter wrote it', async () => {
    const time = new Date('2026-11-30T12:34:56.789Z');
    const ids = [randomUUID(), randomUUID(), randomUUID()];
    const events: PublishInput[] = [
      {
        id: ids[0],
        subject: 'orders.placed',
        key: 'NULL',
        type: 'OrderPlaced',
        data: { text: 'a "quote", a \\ backslash, {braces,commas} ünïcödé 😀', n: 1.5, list: [1, null, 'x'], nested: { empty: '' } },
        headers: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'x-note': 'a "b" \\c {d,e} NULL' },
        time,
      },
      {
        id: ids[1],
        subject: 'files.stored',
        key: 'k {"x",\\y}',
        type: 'FileStored',
        data: Uint8Array.from([0x00, 0x5c, 0x22, 0x7b, 0x2c, 0x7d, 0xff, 0x0a, 0x00]),
        contentType: 'application/octet-stream',
        version: 7,
        time,
      },
      { id: ids[2], subject: 'notes.added', key: 'plain', type: 'NoteAdded', data: 'just a string', time },
    ];
    const reset = async () => {
      await db.pool.query(`DELETE FROM ${s}.outbox WHERE id = ANY ($1::uuid[])`, [ids]);
      await db.pool.query(`DELETE FROM ${s}.key_versions WHERE key = ANY ($1::text[])`, [events.map((e) => e.key)]);
    };
    const written: Record<string, unknown[]> = {};
    for (const path of [nodePostgres, ...NEW_PATHS, drizzleOnNodePostgres]) {
      for (const how of ['publish', 'publishMany'] as const) {
        await reset();
        await path.run(async (tx) => {
          if (how === 'publishMany') await pub().publishMany(tx, events);
          else for (const e of events) await pub().publish(tx, e);
        });
        written[`${path.name} ${how}`] = await storedRows(ids);
      }
    }
    await reset();
    const reference = written['node-postgres publish'] as Array<Record<string, string>>;
    // The reference holds what was given (so a shared mistake cannot pass as agreement).
    assert.equal(reference.length, 3);
    assert.deepEqual(
      reference.map((r) => r.key),
      ['NULL', 'k {"x",\\y}', 'plain'],
    );
    assert.deepEqual(JSON.parse(Buffer.from(reference[0]?.data ?? '', 'hex').toString('utf8')), events[0]?.data);
    assert.deepEqual(JSON.parse(reference[0]?.headers ?? ''), events[0]?.headers);
    assert.equal(reference[1]?.data, '005c227b2c7dff0a00');
    assert.deepEqual(
      reference.map((r) => r.version),
      ['1', '7', '1'],
    );
    assert.equal(reference[0]?.occurred_at, '2026-11-30T12:34:56.789000');
    assert.equal(Buffer.from(reference[2]?.data ?? '', 'hex').toString('utf8'), '"just a string"');
    for (const [name, rows] of Object.entries(written)) assert.deepEqual(rows, reference, `${name} wrote the same rows as node-postgres`);
  });

  test('postgres.js - fromPostgresJs refuses the pool-level sql instance and things that are not postgres.js', () => {
    assert.throws(
      () => fromPostgresJs(sql),
      (err: unknown) => err instanceof ValidationError && /itself, a pool/.test(err.message),
    );
    assert.throws(() => fromPostgresJs(null as never), ValidationError);
    assert.throws(() => fromPostgresJs(db.pool as never), ValidationError);
  });

  test('postgres.js - a postgres.js transaction passed without the adapter is a ValidationError that names fromPostgresJs', async () => {
    await sql.begin(async (tx) => {
      await assert.rejects(pub().publish(tx as never, ev('no-adapter')), (err: unknown) => {
        assert.ok(err instanceof ValidationError);
        assert.match(err.message, /fromPostgresJs/);
        return true;
      });
    });
    assert.deepEqual(await state('no-adapter'), { order: 0, events: [] });
  });
});

/** Backends of this test's database waiting on a lock inside a publish call. */
async function lockWaiters(): Promise<number> {
  const r = await db.pool.query(
    `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '.publish_event%'`,
    [s],
  );
  return r.rows[0].n;
}
