// Least privilege: three LOGIN roles get exactly what `ferry migrate --print-grants`
// prints, and the whole path (publish → relay → inbox) runs with them.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { quoteIdentifier, relayBossSchemaFor, SQLSTATE, sqlState, withTransaction } from '@ferry/core';
import { createInbox, type Inbox } from '@ferry/inbox';
import { createPublisher } from '@ferry/publisher';
import { main } from '@ferry/relay';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream, uniqueName, waitFor } from '@ferry/testkit';
import pg from 'pg';
import { PgBoss } from 'pg-boss';
import { countPending, type RelayProcess, readStream, spawnRelay } from './relay-helpers.js';
import { roleUrl } from './role-helpers.js';

async function cli(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(['node', 'ferry', ...args], { out: (l) => out.push(l), err: (l) => err.push(l), env: {} });
  return { code, out: out.join('\n'), err: err.join('\n') };
}

async function deniedCode(p: Promise<unknown>): Promise<string | undefined> {
  try {
    await p;
    return undefined;
  } catch (err) {
    return sqlState(err);
  }
}

describe('least privilege: --print-grants roles run the whole path', () => {
  let db: TestDatabase;
  let stream: TestStream;
  let inboxSchema: string;
  const roles = { publisher: uniqueName('fp'), relay: uniqueName('fr'), inbox: uniqueName('fi') };
  const pools: pg.Pool[] = [];
  let relay: RelayProcess | undefined;
  let inbox: Inbox | undefined;

  const poolAs = (role: string) => {
    const p = new pg.Pool({ connectionString: roleUrl(db.url, role), max: 4 });
    pools.push(p);
    return p;
  };

  before(async () => {
    db = await createTestDatabase({ prefix: 'sec_grants', migrate: [] });
    await db.pool.query(`DROP SCHEMA ${quoteIdentifier(db.schema)}`);
    inboxSchema = `${db.schema}_in`;
    stream = await createTestStream({ prefix: 'secgrants' });
    const ok = (r: { code: number; err: string }) => assert.equal(r.code, 0, r.err);
    ok(await cli(['migrate', '--database-url', db.url, '--schema', db.schema, '--lanes', '4', '--boss']));
    ok(
      await cli([
        'migrate',
        '--database-url',
        db.url,
        '--schema',
        inboxSchema,
        '--inbox',
        '--boss',
        '--boss-schema',
        `${inboxSchema}_boss`,
      ]),
    );
    for (const [part, role] of Object.entries(roles)) {
      await db.pool.query(`CREATE ROLE ${quoteIdentifier(role)} LOGIN`);
      const schema = part === 'inbox' ? inboxSchema : db.schema;
      // The inbox role is confined to its consumer's rows (row-level security, inbox migration 000006).
      const extra = part === 'inbox' ? ['--boss-schema', `${inboxSchema}_boss`, '--consumer', 'billing'] : [];
      const r = await cli(['migrate', '--print-grants', '--role', role, '--for', part, '--schema', schema, ...extra]);
      ok(r);
      await db.pool.query(r.out);
    }
    // The inbox handler's own table: the application grants it.
    await db.pool.query(`CREATE TABLE ${quoteIdentifier(inboxSchema)}.effects (key text PRIMARY KEY, n int NOT NULL)`);
    await db.pool.query(`GRANT SELECT, INSERT, UPDATE ON ${quoteIdentifier(inboxSchema)}.effects TO ${quoteIdentifier(roles.inbox)}`);
  });

  after(async () => {
    if (relay && relay.proc.exitCode === null && relay.proc.signalCode === null) relay.proc.kill('SIGKILL');
    await inbox?.stop().catch(() => {});
    for (const p of pools) await p.end().catch(() => {});
    for (const s of [db.schema, relayBossSchemaFor(db.schema), inboxSchema, `${inboxSchema}_boss`]) {
      await db.pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(s)} CASCADE`);
    }
    for (const role of Object.values(roles)) {
      await db.pool.query(`DROP OWNED BY ${quoteIdentifier(role)}`).catch(() => {});
      await db.pool.query(`DROP ROLE IF EXISTS ${quoteIdentifier(role)}`);
    }
    await stream?.close();
    await db?.close();
  });

  test('security - --print-grants refuses a role name that is not a plain identifier', async () => {
    for (const bad of ['x"; drop table t; --', 'ferrу', 'ＦＥＲＲＹ', 'r'.repeat(10_240)]) {
      const r = await cli(['migrate', '--print-grants', '--role', bad, '--for', 'relay']);
      assert.equal(r.code, 2);
      assert.equal(r.err.trim().split('\n').length, 1, r.err);
      assert.match(r.err, /--role/);
      assert.ok(!r.out.includes('GRANT'));
    }
  });

  test('security - the publisher role publishes but cannot read or change outbox rows or key_versions', async () => {
    const pool = poolAs(roles.publisher);
    const publisher = createPublisher({ schema: db.schema, source: 'sec-test', notify: true });
    await withTransaction(pool, (tx) =>
      publisher.publishMany(
        tx,
        Array.from({ length: 20 }, (_, i) => ({ subject: `${stream.prefix}.orders`, key: `k${i % 4}`, type: 'Set', data: { n: i } })),
      ),
    );
    // One event: the short path (generated id, next version) and, with an id and a version, publish_event_full (000008).
    await withTransaction(pool, async (tx) => {
      await publisher.publish(tx, { subject: `${stream.prefix}.orders`, key: 'one', type: 'Set', data: { n: 1 } });
      await publisher.publish(tx, {
        id: randomUUID(),
        subject: `${stream.prefix}.orders`,
        key: 'one',
        type: 'Set',
        data: { n: 2 },
        version: 5,
      });
    });
    const s = quoteIdentifier(db.schema);
    for (const sql of [
      `SELECT ${s}.publish_event_ok('k', 'a.b', 't', 's', 'application/json', '{}')`,
      `SELECT * FROM ${s}.publish_event_full(gen_random_uuid(), 'k', NULL, 'a.b', 't', 's', 'application/json', '\\x00', '{}', now(), NULL, false)`,
      `SELECT * FROM ${s}.outbox`,
      `UPDATE ${s}.outbox SET version = 0`,
      `DELETE FROM ${s}.outbox`,
      `SELECT * FROM ${s}.outbox_pending`,
      `UPDATE ${s}.outbox_pending SET attempts = 0`,
      `DELETE FROM ${s}.outbox_pending`,
      `INSERT INTO ${s}.outbox_pending (seq, lane, key) VALUES (999999, 0, 'k')`,
      `SELECT * FROM ${s}.outbox_published`,
      `INSERT INTO ${s}.outbox_published (seq) VALUES (999999)`,
      `SELECT * FROM ${s}.outbox_events`,
      `SELECT * FROM ${s}.key_versions`,
      `UPDATE ${s}.key_versions SET version = 0`,
      `INSERT INTO ${s}.outbox (id, key, version, subject, type, source, content_type, data, headers, occurred_at) VALUES (gen_random_uuid(), 'k', 99, 'a.b', 't', 's', 'application/json', '\\x00', '{}', now())`,
    ]) {
      assert.equal(await deniedCode(pool.query(sql)), SQLSTATE.insufficientPrivilege, sql);
    }
    assert.equal(await countPending(db.pool, db.schema), 22);
  });

  test('security - the relay role (maintenance on) relays to the stream but cannot create tables', async () => {
    relay = spawnRelay([
      '--database-url',
      roleUrl(db.url, roles.relay),
      '--schema',
      db.schema,
      '--nats-url',
      'nats://127.0.0.1:4222',
      '--http-port',
      '0',
      '--poll-interval-ms',
      '50',
    ]);
    await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 20_000, what: 'a drain by the relay role' });
    assert.equal((await readStream(stream.nc, stream.name)).length, 22);
    // Idle, the relay role records that it waits for a NOTIFY (its grants include relay_waiting).
    await waitFor(
      async () =>
        Number(
          (await db.pool.query(`SELECT count(*) FROM ${quoteIdentifier(db.schema)}.relay_waiting WHERE until > now()`)).rows[0].count,
        ) === 1,
      { timeoutMs: 10_000, what: 'the idle relay role to record its wait' },
    );
    const pool = poolAs(roles.relay);
    for (const sql of [
      `CREATE TABLE ${quoteIdentifier(db.schema)}.evil (x int)`,
      'CREATE TABLE public.evil (x int)',
      `CREATE TABLE ${quoteIdentifier(relayBossSchemaFor(db.schema))}.evil (x int)`,
      `SELECT * FROM ${quoteIdentifier(db.schema)}.key_versions`,
    ]) {
      assert.equal(await deniedCode(pool.query(sql)), '42501', sql);
    }
    relay.proc.kill('SIGTERM');
    const exit = await relay.exited;
    assert.equal(exit.code, 0, relay.output().slice(-2000));
    assert.doesNotMatch(relay.output(), /permission denied/i, relay.output().slice(-2000));
  });

  test('security - the relay role runs the prune queue through pg-boss (schedule, send, fetch, complete) and deletes published rows', async () => {
    const boss = new PgBoss({
      connectionString: roleUrl(db.url, roles.relay),
      schema: relayBossSchemaFor(db.schema),
      max: 1,
      supervise: false,
      schedule: false,
      registerInstance: false,
    });
    const errors: unknown[] = [];
    boss.on('error', (err) => errors.push(err));
    await boss.start();
    try {
      await boss.createQueue('ferry-prune', { retryLimit: 2, expireInSeconds: 900 }); // exists: a no-op row insert
      await boss.schedule('ferry-prune', '*/10 * * * *', { retentionMs: 1 }, { tz: 'UTC' });
      const id = await boss.send('ferry-prune', { retentionMs: 1 });
      assert.ok(id, 'a job id');
      const [job] = await boss.fetch('ferry-prune');
      assert.equal(job?.id, id);
      await boss.complete('ferry-prune', id as string);
    } finally {
      await boss.stop({ graceful: false, close: true });
    }
    assert.deepEqual(errors, []);
    const pool = poolAs(roles.relay);
    const s = quoteIdentifier(db.schema);
    const deleted = await pool.query(`DELETE FROM ${s}.outbox o WHERE o.seq IN (SELECT d.seq FROM ${s}.outbox_published d)`);
    assert.equal(deleted.rowCount, 22);
    // Their delivery state goes with them (by trigger, run as the schema's owner: the relay role may not delete a delivery record).
    const { rows: left } = await db.pool.query<{ n: number }>(
      `SELECT (SELECT count(*) FROM ${s}.outbox_published)::int + (SELECT count(*) FROM ${s}.outbox_pending)::int AS n`,
    );
    assert.equal(left[0]?.n, 0);
  });

  test('security - the inbox role consumes and applies with its own handler table granted', async () => {
    const pool = poolAs(roles.inbox);
    const ins = quoteIdentifier(inboxSchema);
    inbox = createInbox<{ Set: unknown }>({
      pool,
      nc: stream.nc,
      stream: stream.name,
      consumer: 'billing',
      schema: inboxSchema,
      bossSchema: `${inboxSchema}_boss`,
      handlers: {
        Set: async (event, { tx }) => {
          await tx.query(`INSERT INTO ${ins}.effects (key, n) VALUES ($1, 1) ON CONFLICT (key) DO UPDATE SET n = effects.n + 1`, [
            event.key,
          ]);
        },
      },
    });
    await inbox.start();
    await waitFor(() => (inbox?.counts().applied ?? 0) === 22, { timeoutMs: 20_000, what: 'the inbox role applying 22 events' });
    const { rows } = await db.pool.query<{ n: string }>(`SELECT sum(n)::text AS n FROM ${ins}.effects`);
    assert.equal(rows[0]?.n, '22');
    assert.equal(await deniedCode(pool.query(`CREATE TABLE ${ins}.evil (x int)`)), '42501');
    await inbox.stop();
    assert.equal(inbox.state, 'stopped');
  });
});
