import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { isMigrationError, MigrationError, type Queryable, quoteIdentifier, withTransaction } from '@ferry/core';
import { createTestDatabase, type TestDatabase, uniqueName } from '@ferry/testkit';
import { createPublisher } from './index.js';

let db: TestDatabase;
let bare: string;
before(async () => {
  db = await createTestDatabase({ prefix: 'pub_schema' });
  bare = uniqueName('pub_bare');
  await db.pool.query(`CREATE SCHEMA ${quoteIdentifier(bare)}`);
});
after(async () => {
  await db.pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(bare)} CASCADE`);
  await db.close();
});

const event = { subject: 'orders.placed', key: 'o-1', type: 'OrderPlaced', data: { total: 1 } };

test('publisher - a schema that does not exist, or was never migrated, is a MigrationError that names ferry migrate --schema', async () => {
  const missing = uniqueName('pub_missing');
  for (const [schema, raw] of [
    [missing, /schema ".*" does not exist/],
    [bare, /function .*publish_event.* does not exist/],
  ] as const) {
    const publisher = createPublisher({ source: 'test', schema });
    const attempts: Array<(tx: Queryable) => Promise<unknown>> = [
      (tx) => publisher.publish(tx, event),
      (tx) => publisher.publishMany(tx, [event, { ...event, key: 'o-2' }]),
    ];
    for (const publish of attempts) {
      const err = await withTransaction(db.pool, publish).then(
        () => assert.fail('published into an unmigrated schema'),
        (e: unknown) => e,
      );
      assert.ok(isMigrationError(err), String(err));
      assert.ok(err instanceof MigrationError);
      assert.equal(err.code, 'FERRY_MIGRATION');
      assert.match(err.message, new RegExp(`run \`ferry migrate --schema ${schema}\``));
      assert.match(err.message, raw);
    }
  }
});

test('publisher - the default schema is "ferry", whatever FERRY_SCHEMA says: libraries never read the environment', () => {
  process.env.FERRY_SCHEMA = 'elsewhere';
  try {
    assert.equal(createPublisher({ source: 'test' }).options.schema, 'ferry');
  } finally {
    delete process.env.FERRY_SCHEMA;
  }
});
