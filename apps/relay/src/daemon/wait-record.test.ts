import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { type Logger, quoteIdentifier, SILENT_LOGGER } from '@ferry/core';
import { createTestDatabase, type TestDatabase, uniqueName, waitFor } from '@ferry/testkit';
import pg from 'pg';
import { WAIT_KEPT_WHILE_BUSY_MS, WaitRecord } from './wait-record.js';

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

  test('relay - a relay that flips between busy and idle keeps its wait record unwritten; work on every poll for the keep time clears it, and busy(true) at once', async () => {
    const record = new WaitRecord(db.pool, s, 'relay-flip', 500, SILENT_LOGGER);
    const row = async () =>
      (
        await db.pool.query<{ version: string; current: boolean }>(
          `SELECT xmin::text AS version, until > now() AS current FROM ${s}.relay_waiting WHERE instance = 'relay-flip'`,
        )
      ).rows[0];
    try {
      assert.equal(await record.idle(), true, 'the first wait is written');
      const written = await row();
      assert.equal(written?.current, true);
      // A relay that catches up between commits: a poll finds rows, the next finds none, a thousand times.
      for (let i = 0; i < 1000; i++) {
        record.busy();
        assert.equal(await record.idle(), false, 'still current: nothing new to poll for');
      }
      assert.deepEqual(await row(), written, 'the row was not rewritten by the flips, and publishers still notify');
      // A backlog: every poll finds work for the keep time.
      record.busy();
      const busyFrom = performance.now();
      await waitFor(
        async () => {
          record.busy();
          return (await row())?.current === false;
        },
        { timeoutMs: 10_000, what: 'the record cleared after the keep time' },
      );
      assert.ok(performance.now() - busyFrom >= WAIT_KEPT_WHILE_BUSY_MS, 'not cleared before the keep time');
      assert.equal(await record.idle(), true, 'the next wait is new again: the caller polls again soon');
      record.busy(true);
      await waitFor(async () => (await row())?.current === false, { timeoutMs: 10_000, what: 'busy(true) cleared the record' });
    } finally {
      await record.forget();
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
