import assert from 'node:assert/strict';
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { quoteIdentifier } from '@ferry/core';
import { createIdempotency } from '@ferry/idempotency';
import { createTestDatabase, type TestDatabase, uniqueName, waitFor } from '@ferry/testkit';

const CHILD = fileURLToPath(new URL('./fixtures/idempotency-crash-child.js', import.meta.url));
let db: TestDatabase;
let s: string;

before(async () => {
  db = await createTestDatabase({ prefix: 'idem_crash', migrate: ['idempotency'] });
  s = quoteIdentifier(db.schema);
  await db.pool.query(`CREATE TABLE ${s}.orders (id serial PRIMARY KEY, idem_key text NOT NULL)`);
});
after(async () => {
  await db?.close();
});

const count = async (sql: string, values: unknown[]) => (await db.pool.query<{ n: number }>(sql, values)).rows[0]?.n;

test('idempotency - a process killed between its effect and the key commit leaves neither, and the retry runs once', async () => {
  const key = 'crash-1';
  const appName = uniqueName('idem_crash_child');
  const child = fork(CHILD, [db.url, db.schema, key, appName], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const exited = once(child, 'exit');
  try {
    const [message] = await once(child, 'message', { signal: AbortSignal.timeout(15_000) });
    assert.equal(message, 'effect-written');
    // The effect and the key exist only inside the child's open transaction.
    assert.equal(await count(`SELECT count(*)::int AS n FROM ${s}.orders WHERE idem_key = $1`, [key]), 0);
    const inTx = await count(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle in transaction'",
      [appName],
    );
    assert.equal(inTx, 1, 'the child is inside its transaction');
  } finally {
    child.kill('SIGKILL');
  }
  const [code, signal] = await exited;
  assert.equal(signal, 'SIGKILL', `child exited with ${code}`);
  // PostgreSQL notices the dead client and rolls its transaction back.
  await waitFor(async () => (await count('SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1', [appName])) === 0, {
    timeoutMs: 15_000,
    what: "the killed child's backend to end",
  });
  assert.equal(await count(`SELECT count(*)::int AS n FROM ${s}.orders WHERE idem_key = $1`, [key]), 0, 'no effect remains');
  assert.equal(await count(`SELECT count(*)::int AS n FROM ${s}.idempotency_keys WHERE key = $1`, [key]), 0, 'no key remains');

  const keys = createIdempotency({ schema: db.schema, scope: 'crash' });
  let executions = 0;
  const retry = () =>
    keys.run(db.pool, { key, principal: 'user-1', fingerprint: { method: 'POST', path: '/orders', body: { amount: 1 } } }, async (tx) => {
      executions++;
      await tx.query(`INSERT INTO ${s}.orders (idem_key) VALUES ($1)`, [key]);
      return { status: 201, body: { ok: true } };
    });
  assert.equal((await retry()).replayed, false);
  assert.equal((await retry()).replayed, true);
  assert.equal(executions, 1);
  assert.equal(await count(`SELECT count(*)::int AS n FROM ${s}.orders WHERE idem_key = $1`, [key]), 1);
});
