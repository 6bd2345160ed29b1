import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { isValidationError, quoteIdentifier } from '@ferry/core';
import { createTestDatabase, type TestDatabase } from '@ferry/testkit';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import knexFactory from 'knex';
import { Kysely, PostgresDialect } from 'kysely';
import { createPublisher } from '../index.js';
import { fromDrizzle } from './drizzle.js';
import { fromKnex } from './knex.js';
import { fromKysely } from './kysely.js';

let db: TestDatabase;
let s: string;
before(async () => {
  db = await createTestDatabase({ prefix: 'adapt' });
  s = quoteIdentifier(db.schema);
  await db.pool.query(`CREATE TABLE ${s}.orders (id text PRIMARY KEY)`);
});
after(() => db.close());

const event = (key: string) => ({ subject: 'orders.placed', key, type: 'OrderPlaced', data: { key, list: [1, 2] } });
async function state(key: string) {
  const o = await db.pool.query(`SELECT 1 FROM ${s}.orders WHERE id = $1`, [key]);
  const e = await db.pool.query(`SELECT version::int FROM ${s}.outbox WHERE key = $1`, [key]);
  return { order: o.rowCount, events: e.rows.map((r) => r.version) };
}

describe('publisher adapters', () => {
  test('publisher adapters - Kysely: the event commits and rolls back with the Kysely transaction', async () => {
    const kdb = new Kysely<Record<string, { id: string }>>({ dialect: new PostgresDialect({ pool: db.pool }) });
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    await kdb.transaction().execute(async (trx) => {
      await trx.insertInto(`${db.schema}.orders`).values({ id: 'ky-1' }).execute();
      await publisher.publishMany(fromKysely(trx), [event('ky-1'), event('ky-1')]);
    });
    assert.deepEqual(await state('ky-1'), { order: 1, events: [1, 2] });
    await assert.rejects(
      kdb.transaction().execute(async (trx) => {
        await trx.insertInto(`${db.schema}.orders`).values({ id: 'ky-2' }).execute();
        await publisher.publish(fromKysely(trx), event('ky-2'));
        throw new Error('abort');
      }),
      /abort/,
    );
    assert.deepEqual(await state('ky-2'), { order: 0, events: [] });
  });

  test('publisher adapters - Knex: the event commits and rolls back with the Knex transaction', async () => {
    const knex = knexFactory({ client: 'pg', connection: db.url, pool: { min: 0, max: 2 } });
    try {
      const publisher = createPublisher({ schema: db.schema, source: 'svc' });
      await knex.transaction(async (trx) => {
        await trx(`${db.schema}.orders`).insert({ id: 'kx-1' });
        await publisher.publishMany(fromKnex(trx), [event('kx-1'), event('kx-1')]);
      });
      assert.deepEqual(await state('kx-1'), { order: 1, events: [1, 2] });
      await assert.rejects(
        knex.transaction(async (trx) => {
          await trx(`${db.schema}.orders`).insert({ id: 'kx-2' });
          await publisher.publish(fromKnex(trx), event('kx-2'));
          throw new Error('abort');
        }),
        /abort/,
      );
      assert.deepEqual(await state('kx-2'), { order: 0, events: [] });
    } finally {
      await knex.destroy();
    }
  });

  test('publisher adapters - Drizzle: the event commits and rolls back with the Drizzle transaction', async () => {
    const ddb = drizzle(db.pool);
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    await ddb.transaction(async (tx) => {
      await tx.execute(sql.raw(`INSERT INTO ${s}.orders (id) VALUES ('dz-1')`));
      await publisher.publishMany(fromDrizzle(tx), [event('dz-1'), event('dz-1')]);
    });
    assert.deepEqual(await state('dz-1'), { order: 1, events: [1, 2] });
    await assert.rejects(
      ddb.transaction(async (tx) => {
        await tx.execute(sql.raw(`INSERT INTO ${s}.orders (id) VALUES ('dz-2')`));
        await publisher.publish(fromDrizzle(tx), event('dz-2'));
        throw new Error('abort');
      }),
      /abort/,
    );
    assert.deepEqual(await state('dz-2'), { order: 0, events: [] });
  });

  test('publisher adapters - a Kysely, knex or Drizzle database object (not a transaction) is refused', async () => {
    const notTx = (err: unknown) => isValidationError(err) && /not inside a transaction/.test(err.message);
    const kdb = new Kysely<Record<string, { id: string }>>({ dialect: new PostgresDialect({ pool: db.pool }) });
    assert.throws(() => fromKysely(kdb), notTx);
    const knex = knexFactory({ client: 'pg', connection: db.url, pool: { min: 0, max: 1 } });
    try {
      assert.throws(() => fromKnex(knex), notTx);
      // A knex transaction that has committed says so: a publish on it is refused.
      let done: ReturnType<typeof fromKnex> | undefined;
      await knex.transaction(async (trx) => {
        done = fromKnex(trx);
        assert.equal(done.inTransaction?.(), true);
      });
      const publisher = createPublisher({ schema: db.schema, source: 'svc' });
      await assert.rejects(publisher.publish(done as ReturnType<typeof fromKnex>, event('kx-late')), notTx);
    } finally {
      await knex.destroy();
    }
    assert.throws(() => fromDrizzle(drizzle(db.pool)), notTx);
    await drizzle(db.pool).transaction(async (tx) => {
      assert.doesNotThrow(() => fromDrizzle(tx));
    });
    assert.deepEqual(await state('kx-late'), { order: 0, events: [] });
  });
});
