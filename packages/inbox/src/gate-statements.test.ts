import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ConfigError, type Queryable, quoteIdentifier } from '@ferry/core';
import { createTestDatabase, type TestDatabase } from '@ferry/testkit';
import type pg from 'pg';
import { beginAndRecordMessage, beginGate, readKeyRow } from './sql/gate-statements.js';

/**
 * The gate's statements run prepared on a connection that keeps them, and as
 * text on one that loses them (a pooler in transaction mode): same answers
 * either way, and one failed attempt at most when a statement goes missing.
 */
describe('inbox gate statements', () => {
  let db: TestDatabase;
  let s: string;
  let client: pg.PoolClient;
  const latest = { sequential: false, ignoreParked: false };
  const sequential = { sequential: true, ignoreParked: false };

  before(async () => {
    db = await createTestDatabase({ prefix: 'inbox_gate_sql', migrate: ['inbox'] });
    s = quoteIdentifier(db.schema);
    client = await db.pool.connect();
  });

  after(async () => {
    client?.release();
    await db?.close();
  });

  const prepared = async () =>
    (await client.query<{ name: string }>(`SELECT name FROM pg_prepared_statements WHERE name LIKE 'ferry_inbox_%'`)).rows.length;

  /** One gate in its own transaction: whether it passed, and the recorded version after it. */
  async function gate(key: string, version: bigint, rule = latest): Promise<{ won: boolean; recorded: bigint }> {
    const won = await beginGate(client, s, 'c1', key, version, rule);
    if (won) {
      await client.query('COMMIT');
      return { won, recorded: version };
    }
    const row = await readKeyRow(client, s, 'c1', key, true);
    return { won, recorded: row.version };
  }

  test('inbox - latest, sequential and dedupe statements run prepared, once per connection, and decide as the text does', async () => {
    assert.deepEqual(await gate("k'1", 2n), { won: true, recorded: 2n });
    assert.deepEqual(await gate("k'1", 2n), { won: false, recorded: 2n }, 'a duplicate');
    assert.deepEqual(await gate("k'1", 1n), { won: false, recorded: 2n }, 'a stale version');
    assert.deepEqual(await gate("k'1", 5n), { won: true, recorded: 5n });
    assert.deepEqual(await gate('seq', 1n, sequential), { won: true, recorded: 1n });
    assert.deepEqual(await gate('seq', 3n, sequential), { won: false, recorded: 1n }, 'a gap');
    assert.deepEqual(await gate('seq', 2n, sequential), { won: true, recorded: 2n });
    assert.equal(await beginAndRecordMessage(client, s, 'c1', 'id-1'), true);
    await client.query('COMMIT');
    assert.equal(await beginAndRecordMessage(client, s, 'c1', 'id-1'), false);
    await client.query('COMMIT');
    // latest gate, key row read, sequential first, sequential next, dedupe record: five statements, each prepared once.
    assert.equal(await prepared(), 5);
  });

  test('inbox - hostile keys and ids travel as literals through the prepared statements: each is its own key, nothing else changes', async () => {
    const keys = ['__proto__', 'constructor', "x'); DELETE FROM inbox_versions; --", '$1', 'a\\b', 'ce-id', 'Nats-Msg-Id', 'ключ 🔑'];
    for (const key of keys) {
      assert.deepEqual(await gate(key, 3n), { won: true, recorded: 3n }, key);
      assert.deepEqual(await gate(key, 2n), { won: false, recorded: 3n }, key);
      assert.equal(await beginAndRecordMessage(client, s, 'c1', key), true, key);
      await client.query('COMMIT');
    }
    const { rows } = await db.pool.query<{ key: string; v: number }>(
      `SELECT key, version::int AS v FROM ${s}.inbox_versions WHERE consumer = 'c1' AND key = ANY ($1::text[])`,
      [keys],
    );
    assert.deepEqual(new Set(rows.map((r) => r.key)), new Set(keys), 'one row per hostile key, stored as given');
    assert.ok(
      rows.every((r) => r.v === 3),
      'each at its own version',
    );
    const all = await db.pool.query(`SELECT count(*)::int AS n FROM ${s}.inbox_versions`);
    assert.equal(all.rows[0].n, keys.length + 2, "the first test's two keys are still there");
    assert.equal(await prepared(), 5, 'no new statement per key: keys are arguments, not text');
  });

  test('inbox - a connection that loses its prepared statements fails one attempt, then runs the text with the same answers', async () => {
    await client.query('DEALLOCATE ALL');
    await assert.rejects(beginGate(client, s, 'c1', 'lost', 1n, latest), (err: { code?: string }) => err.code === '26000');
    await client.query('ROLLBACK');
    assert.deepEqual(await gate('lost', 1n), { won: true, recorded: 1n });
    assert.deepEqual(await gate('lost', 1n), { won: false, recorded: 1n });
    assert.equal(await prepared(), 0, 'nothing is prepared again on that connection');
    const { rows } = await db.pool.query(`SELECT key, version::int AS v FROM ${s}.inbox_versions WHERE key = 'lost'`);
    assert.deepEqual(rows, [{ key: 'lost', v: 1 }]);
  });

  test('inbox - a pool whose results drop rowCount is refused by name, not read as a gate lost', async () => {
    const strip = (r: { rows: unknown[] }) => ({ rows: r.rows });
    const stripped = {
      query: async (sql: string) => {
        const r = (await client.query(sql)) as unknown as { rows: unknown[] } | Array<{ rows: unknown[] }>;
        return Array.isArray(r) ? r.map(strip) : strip(r);
      },
    } as unknown as Queryable;
    await assert.rejects(
      beginGate(stripped, s, 'c1', 'no-row-count', 1n, latest),
      (err: Error) => err instanceof ConfigError && /rowCount/.test(err.message) && /pg\.Pool/.test(err.message),
    );
    await client.query('ROLLBACK');
    const { rows } = await db.pool.query(`SELECT 1 FROM ${s}.inbox_versions WHERE key = 'no-row-count'`);
    assert.equal(rows.length, 0, 'nothing recorded');
  });
});
