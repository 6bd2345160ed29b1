import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream } from '@ferry/testkit';
import { createInbox, isMigrationError, migrateInbox } from './index.js';

let db: TestDatabase;
let stream: TestStream;
before(async () => {
  db = await createTestDatabase({ prefix: 'inbox_unmigrated', migrate: [] });
  stream = await createTestStream({ prefix: 'INUNMIG' });
});
after(async () => {
  await stream?.close();
  await db?.close();
});

test('inbox - start() on a schema without the inbox tables is a MigrationError naming ferry migrate --inbox --schema', async () => {
  const options = { pool: db.pool, nc: stream.nc, stream: stream.name, consumer: 'billing', schema: db.schema, handlers: {} };
  const inbox = createInbox(options);
  const err = await inbox.start().then(
    () => assert.fail('started on an unmigrated schema'),
    (e: unknown) => e,
  );
  assert.ok(isMigrationError(err), String(err));
  assert.match((err as Error).message, new RegExp(`run \`ferry migrate --inbox --schema ${db.schema}\``));
  await inbox.stop();
  // Once migrated, the same options start.
  await migrateInbox({ pool: db.pool, schema: db.schema });
  const migrated = createInbox(options);
  await migrated.start();
  assert.equal(migrated.state, 'running');
  await migrated.stop();
});
