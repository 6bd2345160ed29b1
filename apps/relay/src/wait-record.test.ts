import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { quoteIdentifier, SILENT_LOGGER } from '@ferry/core';
import { createTestDatabase, type TestDatabase } from '@ferry/testkit';
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
});
