import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { isConfigError, quoteIdentifier } from '@ferry/core';
import { createIdempotency, createIdempotencyJanitor, type IdempotencyJanitor } from '@ferry/idempotency';
import { createTestDatabase, type TestDatabase, waitFor } from '@ferry/testkit';

let db: TestDatabase;
let s: string;
let bossSchema: string;
let janitor: IdempotencyJanitor | undefined;

before(async () => {
  db = await createTestDatabase({ prefix: 'idem_ret', migrate: ['idempotency'] });
  s = quoteIdentifier(db.schema);
  bossSchema = `${db.schema}_boss`;
  await db.pool.query(`CREATE TABLE ${s}.orders (id serial PRIMARY KEY, idem_key text NOT NULL)`);
});
after(async () => {
  try {
    await janitor?.stop();
    await db.pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(bossSchema)} CASCADE`);
  } finally {
    await db?.close();
  }
});

const count = async (sql: string, values: unknown[] = []) => (await db.pool.query<{ n: number }>(sql, values)).rows[0]?.n;
/** Moves keys past their retention the way time would (the public 1 h floor stays untouched). */
const expire = (where: string, values: unknown[] = []) =>
  db.pool.query(`UPDATE ${s}.idempotency_keys SET expires_at = now() - interval '1 second' WHERE ${where}`, values);

function place(scope: string) {
  const keys = createIdempotency({ schema: db.schema, scope, retention: '1h' });
  let executions = 0;
  return {
    get executions() {
      return executions;
    },
    run: (key: string) =>
      keys.run(db.pool, { key, principal: 'user-1', fingerprint: { method: 'POST', path: '/orders', body: { key } } }, async (tx) => {
        executions++;
        await tx.query(`INSERT INTO ${s}.orders (idem_key) VALUES ($1)`, [key]);
        return { status: 201, body: { key, execution: executions } };
      }),
  };
}

test('idempotency - a key is kept for its retention and, once past it, a retry runs anew even before pruning', async () => {
  const api = place('boundary');
  await api.run('b-1');
  const { rows } = await db.pool.query<{ ttl: number }>(
    `SELECT extract(epoch FROM expires_at - created_at)::int AS ttl FROM ${s}.idempotency_keys WHERE scope = 'boundary' AND key = 'b-1'`,
  );
  assert.equal(rows[0]?.ttl, 3600, 'expires one retention after creation');
  // Just inside the retention: replayed.
  await db.pool.query(`UPDATE ${s}.idempotency_keys SET expires_at = now() + interval '2 seconds' WHERE key = 'b-1'`);
  assert.equal((await api.run('b-1')).replayed, true);
  // Just past it: a new request, which claims the key afresh.
  await expire("key = 'b-1'");
  const again = await api.run('b-1');
  assert.equal(again.replayed, false);
  assert.deepEqual(again.body, { key: 'b-1', execution: 2 });
  assert.equal(api.executions, 2);
  assert.equal(await count(`SELECT count(*)::int AS n FROM ${s}.orders WHERE idem_key = 'b-1'`), 2);
  assert.equal((await api.run('b-1')).replayed, true, 'the new answer is stored for a new retention');
});

test('idempotency - the pg-boss janitor prunes expired keys in bounded batches and a retry then runs anew', async () => {
  const api = place('janitor');
  for (let i = 0; i < 25; i++) await api.run(`j-${i}`);
  await expire("scope = 'janitor' AND key <> ALL($1)", [['j-0', 'j-1', 'j-2', 'j-3', 'j-4']]);

  // One run deletes at most batchSize × maxBatchesPerRun rows.
  const bounded = createIdempotencyJanitor({
    pool: db.pool,
    schema: db.schema,
    boss: undefined,
    connectionString: db.url,
    batchSize: 3,
    maxBatchesPerRun: 2,
  });
  assert.equal(await bounded.pruneOnce(), 6);
  assert.equal(await count(`SELECT count(*)::int AS n FROM ${s}.idempotency_keys WHERE scope = 'janitor'`), 19);

  janitor = createIdempotencyJanitor({
    pool: db.pool,
    schema: db.schema,
    connectionString: db.url,
    bossSchema,
    batchSize: 4,
    pollIntervalMs: 500,
  });
  await janitor.start();
  assert.equal(janitor.state, 'running');
  const schedule = await db.pool.query<{ cron: string }>(`SELECT cron FROM ${quoteIdentifier(bossSchema)}.schedule WHERE name = $1`, [
    janitor.queue,
  ]);
  assert.equal(schedule.rows[0]?.cron, '*/5 * * * *');

  await janitor.triggerNow();
  await waitFor(async () => (await count(`SELECT count(*)::int AS n FROM ${s}.idempotency_keys WHERE scope = 'janitor'`)) === 5, {
    timeoutMs: 20_000,
    what: 'the janitor job to prune the 14 remaining expired keys',
  });
  const left = await db.pool.query<{ key: string }>(`SELECT key FROM ${s}.idempotency_keys WHERE scope = 'janitor' ORDER BY key`);
  assert.deepEqual(
    left.rows.map((r) => r.key),
    ['j-0', 'j-1', 'j-2', 'j-3', 'j-4'],
  );

  const pruned = await api.run('j-10');
  assert.equal(pruned.replayed, false, 'a retry after pruning runs as a new request');
  assert.equal((await api.run('j-0')).replayed, true, 'an unexpired key still replays');
  assert.equal(api.executions, 26);

  await janitor.stop();
  assert.equal(janitor.state, 'stopped');
});

test('idempotency janitor - start() after stop() is a ConfigError: a stopped janitor is not restarted', async () => {
  const once = createIdempotencyJanitor({ pool: db.pool, schema: db.schema, connectionString: db.url, bossSchema });
  await once.start();
  await once.stop();
  assert.equal(once.state, 'stopped');
  await assert.rejects(once.start(), (err: unknown) => isConfigError(err) && /stopped; create a new one/.test((err as Error).message));
  assert.equal(once.state, 'stopped');
});
