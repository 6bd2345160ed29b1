import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { type Logger, quoteIdentifier, SILENT_LOGGER } from '@ferry/core';
import { createTestDatabase, type TestDatabase, uniqueName } from '@ferry/testkit';
import pg from 'pg';
import { WaitRecord } from './wait-record.js';

// idle() says "new record, poll again in 5 ms" only when the record was written: a write that
// fails (here a lock timeout) must not make the dispatcher poll every 5 ms for as long as it fails.

let db: TestDatabase;
let s: string;
before(async () => {
  db = await createTestDatabase({ prefix: 'waitrec', max: 4 });
  s = quoteIdentifier(db.schema);
});
after(() => db.close());

describe('relay wait record', () => {
  test('relay - a wait record whose write fails is not reported new, and is retried and reported once it succeeds', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 1, options: '-c lock_timeout=50' });
    const locker = await db.pool.connect();
    try {
      const record = new WaitRecord(pool, s, 'relay-a', 500, SILENT_LOGGER);
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE ${s}.relay_waiting IN ACCESS EXCLUSIVE MODE`);
      assert.equal(await record.idle(), false, 'the write timed out: nothing new to poll for');
      assert.equal(await record.idle(), false, 'still failing');
      await locker.query('ROLLBACK');
      assert.equal(await record.idle(), true, 'written: the caller polls again soon');
      assert.equal(await record.idle(), false, 'current: no second "new"');
      const { rows } = await db.pool.query(`SELECT instance FROM ${s}.relay_waiting WHERE until > now()`);
      assert.deepEqual(rows, [{ instance: 'relay-a' }]);
      await record.forget();
    } finally {
      locker.release();
      await pool.end();
    }
  });

  // A schema without the table, or a role without the grant: not transient. The relay says the fix once and stops
  // writing (each refusal would be an ERROR in the server's log), and keeps polling.
  async function refusedOnce(pool: pg.Pool, schemaSql: string, fix: RegExp): Promise<void> {
    const warnings: string[] = [];
    const logger: Logger = { ...SILENT_LOGGER, warn: (obj, msg) => warnings.push(`${(obj as { event?: string }).event}: ${msg}`) };
    const record = new WaitRecord(pool, schemaSql, 'relay-b', 500, logger);
    assert.equal(await record.idle(), false, 'nothing was recorded');
    assert.equal(warnings.length, 1);
    assert.match(warnings[0] ?? '', /^wait-record-unsupported: /);
    assert.match(warnings[0] ?? '', fix);
    record.busy();
    assert.equal(await record.idle(), false);
    await record.forget();
    assert.equal(warnings.length, 1, 'said once; no statement is sent again');
  }

  test('relay - a schema without relay_waiting: the wait record says to migrate, once, and the relay polls', async () => {
    const bare = uniqueName('waitrec_bare');
    await db.pool.query(`CREATE SCHEMA ${quoteIdentifier(bare)}`);
    try {
      await refusedOnce(db.pool, quoteIdentifier(bare), /run `ferry migrate`/);
    } finally {
      await db.pool.query(`DROP SCHEMA ${quoteIdentifier(bare)} CASCADE`);
    }
  });

  test('relay - a role that may not write relay_waiting: the wait record names the grants, once', async () => {
    const role = uniqueName('waitrec_role');
    await db.pool.query(`CREATE ROLE ${quoteIdentifier(role)} LOGIN`);
    await db.pool.query(`GRANT USAGE ON SCHEMA ${s} TO ${quoteIdentifier(role)}`);
    const url = new URL(db.url);
    url.username = role; // node-postgres takes the user from the URL over a `user` option
    const pool = new pg.Pool({ connectionString: url.href, max: 1 });
    try {
      await refusedOnce(pool, s, /--print-grants --role <role> --for relay/);
    } finally {
      await pool.end();
      await db.pool.query(`DROP OWNED BY ${quoteIdentifier(role)}`);
      await db.pool.query(`DROP ROLE ${quoteIdentifier(role)}`);
    }
  });
});
