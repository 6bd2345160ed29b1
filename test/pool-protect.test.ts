// A connection whose backend is terminated while no owner listens must not end the process (the inbox
// consumers of the long chaos runs did, on SQLSTATE 57P01). protectPool gives every connection a pool
// opens an error listener of its own.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { protectPool } from '@ferry/core';
import { databaseUrl, waitFor } from '@ferry/testkit';
import pg from 'pg';

test('core - a connection of a protected pool whose backend is terminated while checked out and unheard does not end the process', async () => {
  const pool = new pg.Pool({ connectionString: databaseUrl(), max: 1, application_name: 'ferry-pool-protect' });
  protectPool(pool);
  protectPool(pool); // idempotent: one listener per connection
  const admin = new pg.Client({ connectionString: databaseUrl() });
  await admin.connect();
  try {
    const client = await pool.connect(); // checked out, and its owner adds no listener of its own
    assert.equal(client.listenerCount('error'), 1, 'the pool added exactly one listener');
    const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    let lost: Error | undefined;
    client.once('end', () => {
      lost = new Error('ended');
    });
    await admin.query('SELECT pg_terminate_backend($1)', [rows[0]?.pid]);
    // Without the listener, the 57P01 error event is unheard and this test file dies here.
    await waitFor(() => lost !== undefined, { timeoutMs: 10_000, what: 'the terminated connection to end' });
    await assert.rejects(client.query('SELECT 1'), 'the owner learns of the loss from its next query');
    client.release(new Error('lost'));
    assert.deepEqual((await pool.query<{ one: number }>('SELECT 1 AS one')).rows, [{ one: 1 }], 'the pool opens a new connection');
  } finally {
    await admin.end();
    await pool.end();
  }
});
