import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { quoteIdentifier } from '@ferry/core';
import { createTestDatabase, natsUrl, type TestDatabase } from '@ferry/testkit';
import { ferry } from './ops-helpers.js';

// Issue 14 item 14: another application's `migrations` or `outbox` table in the chosen schema
// crashed migrate (exit 1), doctor (no findings, exit 1) and status on a missing column.

let db: TestDatabase;
let both: string;
let onlyOutbox: string;

before(async () => {
  db = await createTestDatabase({ prefix: 'ops_foreign', migrate: [] });
  both = `${db.schema}_both`;
  onlyOutbox = `${db.schema}_outbox`;
  for (const schema of [both, onlyOutbox]) await db.pool.query(`CREATE SCHEMA ${quoteIdentifier(schema)}`);
  await db.pool.query(`CREATE TABLE ${quoteIdentifier(both)}.migrations (id serial PRIMARY KEY, filename text, run_on timestamptz)`);
  for (const schema of [both, onlyOutbox]) {
    await db.pool.query(`CREATE TABLE ${quoteIdentifier(schema)}.outbox (id bigserial PRIMARY KEY, topic text, payload jsonb)`);
  }
});
after(async () => {
  for (const schema of [both, onlyOutbox]) await db.pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(schema)} CASCADE`);
  await db.close();
});

const tables = async (schema: string) =>
  (await db.pool.query<{ t: string }>('SELECT tablename AS t FROM pg_tables WHERE schemaname = $1 ORDER BY tablename', [schema])).rows.map(
    (r) => r.t,
  );

test('ferry migrate, status, doctor - a schema with foreign migrations/outbox tables is named, touched by nothing, and exits with its documented code', async () => {
  for (const [schema, foreign] of [
    [both, 'migrations, outbox'],
    [onlyOutbox, 'outbox'],
  ] as const) {
    const before = await tables(schema);
    const message = new RegExp(`schema "${schema}" holds tables Ferry did not create \\(${foreign}\\)`);
    const migrate = await ferry(['migrate', '--database-url', db.url, '--schema', schema]);
    assert.equal(migrate.code, 3, `migrate: ${migrate.err}`);
    assert.match(migrate.err, message);
    const status = await ferry(['status', '--database-url', db.url, '--schema', schema]);
    assert.equal(status.code, 3, `status: ${status.err}`);
    assert.match(status.err, message);
    const doctor = await ferry(['doctor', '--database-url', db.url, '--schema', schema, '--nats-url', natsUrl(), '--json']);
    const report = doctor.json<{ findings: Array<{ check: string; status: string; message: string }> }>();
    const problems = report.findings.filter((f) => f.status === 'problem');
    assert.equal(doctor.code, 1, 'doctor exits 1 when it found problems');
    assert.ok(problems.length > 0);
    assert.ok(
      problems.some((f) => f.check === 'migrations' && message.test(f.message)),
      JSON.stringify(report.findings),
    );
    const replay = await ferry(['replay', '--database-url', db.url, '--schema', schema, '--from-seq', '1', '--dry-run']);
    assert.equal(replay.code, 3, `replay: ${replay.err}`);
    assert.deepEqual(await tables(schema), before, 'nothing created or dropped');
  }
});
