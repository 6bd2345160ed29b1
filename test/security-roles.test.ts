// Least privilege, from the attacker's side: every part migrated into one schema with the
// documented defaults, one LOGIN role per part (two inbox roles, one per consumer) holding
// exactly what `ferry migrate --print-grants` prints, each trying the others' tables, columns,
// rows and pg-boss schedules and jobs (issue 32 item 4). security-grants.test.ts runs the whole
// path with such roles; this file shows what they cannot do, and that the operator commands
// still work as the relay and reader roles.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { bossSchemaFor, idempotencyBossSchemaFor, quoteIdentifier, relayBossSchemaFor, SQLSTATE } from '@ferry/core';
import { createIdempotencyJanitor } from '@ferry/idempotency';
import { main } from '@ferry/relay';
import { createTestDatabase, type TestDatabase, uniqueName } from '@ferry/testkit';
import pg from 'pg';
import { PgBoss } from 'pg-boss';
import { setFailed } from './delivery-state.js';
import { publishEvents } from './relay-helpers.js';
import { outcome, roleUrl } from './role-helpers.js';

async function cli(args: string[], env: Record<string, string> = {}): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(['node', 'ferry', ...args], { out: (l) => out.push(l), err: (l) => err.push(l), env });
  return { code, out: out.join('\n'), err: err.join('\n') };
}

const DENIED = SQLSTATE.insufficientPrivilege;

describe('least privilege: no role can hurt another role’s work', () => {
  let db: TestDatabase;
  let s: string;
  let relayBoss: string;
  let inboxBoss: string;
  let idemBoss: string;
  const roles = {
    publisher: uniqueName('rp'),
    relay: uniqueName('rr'),
    billing: uniqueName('rib'),
    shipping: uniqueName('ris'),
    idempotency: uniqueName('rid'),
    reader: uniqueName('rrd'),
  };
  const pools = new Map<string, pg.Pool>();
  const as = (role: string) => {
    let p = pools.get(role);
    if (!p) {
      p = new pg.Pool({ connectionString: roleUrl(db.url, role), max: 2 });
      pools.set(role, p);
    }
    return p;
  };
  let migrateErr = '';

  /** A pg-boss of the owner's on `schema`, for setting the scene. */
  async function ownerBoss<T>(schema: string, fn: (boss: PgBoss) => Promise<T>): Promise<T> {
    const boss = new PgBoss({ connectionString: db.url, schema, max: 1, supervise: false, schedule: false, registerInstance: false });
    boss.on('error', () => {});
    await boss.start();
    try {
      return await fn(boss);
    } finally {
      await boss.stop({ graceful: false, close: true });
    }
  }

  before(async () => {
    db = await createTestDatabase({ prefix: 'sec_roles', migrate: [] });
    await db.pool.query(`DROP SCHEMA ${quoteIdentifier(db.schema)}`);
    s = quoteIdentifier(db.schema);
    relayBoss = quoteIdentifier(relayBossSchemaFor(db.schema));
    inboxBoss = quoteIdentifier(bossSchemaFor(db.schema));
    idemBoss = quoteIdentifier(idempotencyBossSchemaFor(db.schema));
    // What an earlier Ferry left: the relay's and the janitor's schedules in <schema>_boss.
    await ownerBoss(bossSchemaFor(db.schema), async (boss) => {
      for (const q of ['ferry-prune', `ferry.idempotency.prune.${db.schema}`]) {
        await boss.createQueue(q);
        await boss.schedule(q, '*/10 * * * *', {}, { tz: 'UTC' });
      }
    });
    const ok = (r: { code: number; err: string }) => {
      assert.equal(r.code, 0, r.err);
      migrateErr += `${r.err}\n`;
    };
    const base = ['--database-url', db.url, '--schema', db.schema];
    ok(await cli(['migrate', ...base, '--lanes', '2', '--boss']));
    ok(await cli(['migrate', ...base, '--inbox', '--boss']));
    ok(await cli(['migrate', ...base, '--idempotency', '--boss']));

    // The scene: a relay's prune schedule, each consumer's parked event, versions, a stored answer, events.
    await ownerBoss(relayBossSchemaFor(db.schema), (boss) => boss.schedule('ferry-prune', '*/10 * * * *', {}, { tz: 'UTC' }));
    await ownerBoss(bossSchemaFor(db.schema), async (boss) => {
      for (const consumer of ['billing', 'shipping']) {
        await boss.createQueue(`ferry.inbox.${consumer}.parked`);
        await boss.send(`ferry.inbox.${consumer}.parked`, { secret: `${consumer}-parked` });
      }
    });
    await db.pool.query(
      `INSERT INTO ${s}.inbox_versions (consumer, key, version) VALUES ('billing', 'k', 7), ('shipping', 'k', 7);
       INSERT INTO ${s}.inbox_messages (consumer, id) VALUES ('billing', 'm1'), ('shipping', 'm1');
       INSERT INTO ${s}.idempotency_keys (scope, key, fingerprint, status, expires_at)
       VALUES ('api', 'k1', decode(repeat('ab', 32), 'hex'), 200, now() + interval '1 day')`,
    );
    await publishEvents(db.pool, db.schema, 'sec.roles', 4, { keys: 2 });

    const grants: Array<[string, string[]]> = [
      [roles.publisher, ['--for', 'publisher']],
      [roles.relay, ['--for', 'relay']],
      [roles.billing, ['--for', 'inbox', '--consumer', 'billing']],
      [roles.shipping, ['--for', 'inbox', '--consumer', 'shipping']],
      [roles.idempotency, ['--for', 'idempotency']],
      [roles.reader, ['--for', 'reader']],
    ];
    for (const [role, args] of grants) {
      await db.pool.query(`CREATE ROLE ${quoteIdentifier(role)} LOGIN`);
      const r = await cli(['migrate', '--print-grants', '--role', role, '--schema', db.schema, ...args]);
      assert.equal(r.code, 0, r.err);
      await db.pool.query(r.out);
    }
  });

  after(async () => {
    for (const p of pools.values()) await p.end().catch(() => {});
    for (const schema of [db.schema, bossSchemaFor(db.schema), relayBossSchemaFor(db.schema), idempotencyBossSchemaFor(db.schema)]) {
      await db.pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(schema)} CASCADE`);
    }
    for (const role of Object.values(roles)) {
      await db.pool.query(`DROP OWNED BY ${quoteIdentifier(role)}`).catch(() => {});
      await db.pool.query(`DROP ROLE IF EXISTS ${quoteIdentifier(role)}`);
    }
    await db.close();
  });

  test('roles - ferry migrate --boss moved the old prune schedules out of the shared <schema>_boss', async () => {
    assert.match(migrateErr, /removed the ferry-prune schedule/);
    assert.match(migrateErr, /removed the ferry\.idempotency\.prune\.\S+ schedule/);
    const left = await db.pool.query<{ name: string }>(`SELECT name FROM ${inboxBoss}.schedule ORDER BY name`);
    assert.deepEqual(left.rows, []);
    const relays = await db.pool.query<{ name: string }>(`SELECT name FROM ${relayBoss}.schedule`);
    assert.deepEqual(
      relays.rows.map((r) => r.name),
      ['ferry-prune'],
    );
  });

  test('roles - the relay never changes an event: it updates only the delivery state, in outbox_pending and outbox_published', async () => {
    const relay = as(roles.relay);
    // Since outbox migration 000015 no column of the event row is the relay's to update.
    // (seq, an identity column, and lane, a generated one, are refused by PostgreSQL whoever asks: the
    // privilege check after the loop covers them.)
    for (const column of [
      'subject',
      'data',
      'key',
      'version',
      'type',
      'source',
      'content_type',
      'headers',
      'id',
      'occurred_at',
      'created_at',
    ]) {
      assert.equal(await outcome(relay, `UPDATE ${s}.outbox SET ${column} = ${column}`), DENIED, column);
    }
    const privileges = await db.pool.query<{ table_update: boolean; any_column_update: boolean; pending_insert: boolean }>(
      `SELECT has_table_privilege($1, $2, 'UPDATE') AS table_update, has_any_column_privilege($1, $2, 'UPDATE') AS any_column_update,
              has_table_privilege($1, $3, 'INSERT') AS pending_insert`,
      [roles.relay, `${s}.outbox`, `${s}.outbox_pending`],
    );
    assert.deepEqual(
      privileges.rows,
      [{ table_update: false, any_column_update: false, pending_insert: false }],
      'no UPDATE of any outbox column',
    );
    const insert = `INSERT INTO ${s}.outbox (id, key, version, subject, type, source, content_type, data, headers, occurred_at)
      VALUES (gen_random_uuid(), 'k', 99, 'a.b', 't', 's', 'application/json', '\\x00', '{}', now())`;
    assert.equal(await outcome(relay, insert), DENIED);
    // Nor can it make an event pending (only a committed event is, by the outbox's trigger), or rewrite a delivered one.
    assert.equal(await outcome(relay, `INSERT INTO ${s}.outbox_pending (seq, lane, key) VALUES (999999, 0, 'k')`), DENIED);
    assert.equal(await outcome(relay, `UPDATE ${s}.outbox_published SET attempts = attempts`), DENIED);
    // Nor point a pending row at another event, key or lane (a re-send out of turn), or erase a delivery record.
    for (const column of ['seq', 'lane', 'key']) {
      assert.equal(await outcome(relay, `UPDATE ${s}.outbox_pending SET ${column} = ${column}`), DENIED, `outbox_pending.${column}`);
    }
    assert.equal(await outcome(relay, `DELETE FROM ${s}.outbox_published`), DENIED);
    // A failure record: the delivery state of the pending rows.
    for (const column of ['attempts', 'next_attempt_at', 'last_error', 'dead_at']) {
      assert.equal(await outcome(relay, `UPDATE ${s}.outbox_pending SET ${column} = ${column}`), 'ok (4 rows)', column);
    }
    // The mark (delete the pending row, record it published) and reading every state, rolled back.
    const client = await relay.connect();
    try {
      await client.query('BEGIN');
      const marked = await client.query(
        `WITH done AS (DELETE FROM ${s}.outbox_pending p WHERE p.seq = (SELECT min(seq) FROM ${s}.outbox) RETURNING p.seq, p.attempts, p.last_error)
         INSERT INTO ${s}.outbox_published (seq, attempts, last_error) SELECT d.seq, d.attempts, d.last_error FROM done d`,
      );
      assert.equal(marked.rowCount, 1);
      const seen = await client.query<{ published: number; pending: number }>(
        `SELECT count(*) FILTER (WHERE published_at IS NOT NULL)::int AS published, count(*) FILTER (WHERE published_at IS NULL)::int AS pending
           FROM ${s}.outbox_events`,
      );
      assert.deepEqual(seen.rows, [{ published: 1, pending: 3 }]);
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
    for (const sql of [
      `SELECT * FROM ${s}.key_versions`,
      `INSERT INTO ${s}.settings (name, value) VALUES ('retention_ms', '1')`,
      `UPDATE ${s}.settings SET value = '1'`,
    ]) {
      assert.equal(await outcome(relay, sql), DENIED, sql);
    }
  });

  test('roles - the relay cannot read or change the inbox’s parked events, versions or message ids, nor stored answers', async () => {
    const relay = as(roles.relay);
    for (const sql of [
      `SELECT data FROM ${inboxBoss}.job`,
      `DELETE FROM ${inboxBoss}.job`,
      `SELECT * FROM ${inboxBoss}.queue`,
      `SELECT * FROM ${s}.inbox_versions`,
      `UPDATE ${s}.inbox_versions SET version = 0`,
      `DELETE FROM ${s}.inbox_messages`,
      `SELECT * FROM ${s}.inbox_early`,
      `SELECT body FROM ${s}.idempotency_keys`,
      `DELETE FROM ${s}.idempotency_keys`,
      `SELECT * FROM ${idemBoss}.schedule`,
    ]) {
      assert.equal(await outcome(relay, sql), DENIED, sql);
    }
    // Its own pg-boss is its to use.
    assert.equal(await outcome(relay, `SELECT name FROM ${relayBoss}.schedule`), 'ok (1 rows)');
  });

  test('roles - an inbox role cannot delete or change the relay’s prune schedule, nor touch the outbox', async () => {
    for (const role of [roles.billing, roles.shipping]) {
      const inbox = as(role);
      for (const sql of [
        `DELETE FROM ${relayBoss}.schedule WHERE name = 'ferry-prune'`,
        `UPDATE ${relayBoss}.schedule SET cron = '0 0 1 1 *'`,
        `SELECT * FROM ${relayBoss}.job`,
        `SELECT * FROM ${s}.outbox`,
        `UPDATE ${s}.outbox SET version = version`,
        `DELETE FROM ${s}.outbox`,
        `SELECT * FROM ${s}.outbox_pending`,
        `UPDATE ${s}.outbox_pending SET attempts = 0`,
        `DELETE FROM ${s}.outbox_pending`,
        `SELECT * FROM ${s}.outbox_published`,
        `INSERT INTO ${s}.outbox_published (seq) VALUES (999999)`,
        `SELECT * FROM ${s}.outbox_events`,
        `SELECT * FROM ${s}.key_versions`,
        `SELECT * FROM ${s}.idempotency_keys`,
        `SELECT * FROM ${idemBoss}.schedule`,
      ]) {
        assert.equal(await outcome(inbox, sql), DENIED, `${role}: ${sql}`);
      }
    }
    const { rows } = await db.pool.query(`SELECT cron FROM ${relayBoss}.schedule WHERE name = 'ferry-prune'`);
    assert.deepEqual(rows, [{ cron: '*/10 * * * *' }]);
  });

  test('roles - the billing inbox role cannot read or write the shipping consumer’s rows', async () => {
    const billing = as(roles.billing);
    const seen = await billing.query<{ consumer: string }>(`SELECT DISTINCT consumer FROM ${s}.inbox_versions`);
    assert.deepEqual(
      seen.rows.map((r) => r.consumer),
      ['billing'],
    );
    // A new row, or a gate upsert, for the other consumer: refused by the policy's WITH CHECK.
    for (const sql of [
      `INSERT INTO ${s}.inbox_versions (consumer, key, version) VALUES ('shipping', 'new', 1)`,
      `INSERT INTO ${s}.inbox_versions (consumer, key, version) VALUES ('shipping', 'k', 99)
         ON CONFLICT (consumer, key) DO UPDATE SET version = excluded.version`,
      `INSERT INTO ${s}.inbox_messages (consumer, id) VALUES ('shipping', 'm2')`,
      `INSERT INTO ${s}.inbox_early (consumer, key, version, message) VALUES ('shipping', 'k', 9, '{}')`,
      // Moving its own row over to the other consumer.
      `UPDATE ${s}.inbox_versions SET consumer = 'shipping', key = 'moved' WHERE consumer = 'billing'`,
    ]) {
      assert.equal(await outcome(billing, sql), DENIED, sql);
    }
    // The other consumer's rows are not there for it: an UPDATE or DELETE of them changes nothing.
    assert.equal(await outcome(billing, `UPDATE ${s}.inbox_versions SET version = 0 WHERE consumer = 'shipping'`), 'ok (0 rows)');
    assert.equal(await outcome(billing, `DELETE FROM ${s}.inbox_messages WHERE consumer = 'shipping'`), 'ok (0 rows)');
    const shipping = await db.pool.query(`SELECT version::int AS v FROM ${s}.inbox_versions WHERE consumer = 'shipping'`);
    assert.deepEqual(shipping.rows, [{ v: 7 }]);
    const ids = await db.pool.query(`SELECT count(*)::int AS n FROM ${s}.inbox_messages WHERE consumer = 'shipping'`);
    assert.deepEqual(ids.rows, [{ n: 1 }]);
    // Its own consumer's rows, the gate's way.
    assert.equal(
      await outcome(
        billing,
        `INSERT INTO ${s}.inbox_versions (consumer, key, version) VALUES ('billing', 'k', 8)
           ON CONFLICT (consumer, key) DO UPDATE SET version = excluded.version WHERE ${s}.inbox_versions.version < excluded.version`,
      ),
      'ok (1 rows)',
    );
    assert.deepEqual((await as(roles.shipping).query(`SELECT consumer, version::int AS v FROM ${s}.inbox_versions`)).rows, [
      { consumer: 'shipping', v: 7 },
    ]);
  });

  test('roles - the publisher and the idempotency role reach nothing of the other parts', async () => {
    for (const [role, sqls] of [
      [
        roles.publisher,
        [
          `SELECT * FROM ${s}.outbox`,
          `SELECT * FROM ${s}.outbox_pending`,
          `SELECT * FROM ${s}.outbox_published`,
          `SELECT * FROM ${s}.outbox_events`,
          `SELECT * FROM ${s}.migrations`,
          `SELECT * FROM ${s}.inbox_versions`,
          `SELECT * FROM ${s}.idempotency_keys`,
          `SELECT * FROM ${relayBoss}.schedule`,
          `SELECT * FROM ${inboxBoss}.job`,
        ],
      ],
      [
        roles.idempotency,
        [
          `SELECT * FROM ${s}.outbox`,
          `SELECT * FROM ${s}.outbox_pending`,
          `SELECT * FROM ${s}.outbox_events`,
          `SELECT * FROM ${s}.key_versions`,
          `SELECT * FROM ${s}.inbox_versions`,
          `DELETE FROM ${s}.inbox_messages`,
          `SELECT * FROM ${inboxBoss}.job`,
          `DELETE FROM ${relayBoss}.schedule`,
        ],
      ],
    ] as const) {
      for (const sql of sqls) assert.equal(await outcome(as(role), sql), DENIED, `${role}: ${sql}`);
    }
  });

  test('roles - the idempotency role stores answers and runs its janitor in its own pg-boss', async () => {
    const pool = as(roles.idempotency);
    assert.equal(await outcome(pool, `UPDATE ${s}.idempotency_keys SET expires_at = now() - interval '1 second'`), 'ok (1 rows)');
    const janitor = createIdempotencyJanitor({
      pool,
      schema: db.schema,
      connectionString: roleUrl(db.url, roles.idempotency),
      pollIntervalMs: 500,
    });
    await janitor.start();
    try {
      assert.equal(await janitor.pruneOnce(), 1);
    } finally {
      await janitor.stop();
    }
    const { rows } = await db.pool.query<{ name: string }>(`SELECT name FROM ${idemBoss}.schedule`);
    assert.deepEqual(
      rows.map((r) => r.name),
      [`ferry.idempotency.prune.${db.schema}`],
    );
  });

  test('roles - the reader only reads: status, doctor, dlq list and migrate --dry-run work, writes are refused', async () => {
    const reader = as(roles.reader);
    for (const sql of [
      `UPDATE ${s}.outbox SET version = 0`,
      `DELETE FROM ${s}.outbox`,
      `UPDATE ${s}.outbox_pending SET attempts = 0`,
      `DELETE FROM ${s}.outbox_pending`,
      `INSERT INTO ${s}.outbox_published (seq) VALUES (999999)`,
      `DELETE FROM ${s}.outbox_published`,
      `INSERT INTO ${s}.settings (name, value) VALUES ('x', '1')`,
      `SELECT * FROM ${s}.published_ids`,
      `SELECT * FROM ${s}.inbox_versions`,
      `SELECT * FROM ${relayBoss}.schedule`,
    ]) {
      assert.equal(await outcome(reader, sql), DENIED, sql);
    }
    // Nor can it borrow the outbox's delete trigger (which runs as the owner) for a table of its own, to
    // delete the delivery state of seqs it chooses: an event whose pending row went would never be sent.
    assert.equal(
      await outcome(reader, 'CREATE TEMP TABLE borrowed (seq bigint); DROP TABLE borrowed'),
      'ok (0 rows)',
      'a temp table of its own it may have',
    );
    for (const fn of ['outbox_forget', 'outbox_enqueue', 'outbox_forget_all']) {
      const borrow = `CREATE TEMP TABLE borrowed (seq bigint, lane smallint, key text);
        CREATE TRIGGER borrow AFTER DELETE ON borrowed REFERENCING OLD TABLE AS outbox_old FOR EACH STATEMENT EXECUTE FUNCTION ${s}.${fn}()`;
      assert.equal(await outcome(reader, borrow), DENIED, fn);
    }
    const url = roleUrl(db.url, roles.reader);
    const base = ['--database-url', url, '--schema', db.schema];
    for (const args of [['status'], ['dlq', 'list'], ['migrate', '--dry-run'], ['migrate', '--dry-run', '--retention', '3d']]) {
      const r = await cli([...args, ...base]);
      assert.equal(r.code, 0, `${args.join(' ')}: ${r.err}`);
      assert.doesNotMatch(`${r.out}\n${r.err}`, /permission denied/i, args.join(' '));
    }
    const doctor = await cli(['doctor', ...base, '--nats-url', 'nats://127.0.0.1:4222', '--json']);
    const report = JSON.parse(doctor.out) as { findings: Array<{ check: string; status: string; detail: string }> };
    assert.equal(report.findings.find((f) => f.check === 'migrations')?.status, 'ok', doctor.out);
    assert.doesNotMatch(doctor.out, /permission denied/i);
  });

  test('roles - as the relay role, ferry dlq retry and discard, doctor and migrate --dry-run work', async () => {
    const ids = (await db.pool.query<{ id: string }>(`SELECT id::text FROM ${s}.outbox ORDER BY seq LIMIT 2`)).rows.map((r) => r.id);
    assert.equal(await setFailed(db.pool, db.schema, 'o.id = ANY ($1::uuid[])', [ids], { attempts: 5, lastError: 'boom', dead: true }), 2);
    const base = ['--database-url', roleUrl(db.url, roles.relay), '--schema', db.schema];
    const retried = await cli(['dlq', 'retry', ids[0] as string, '--yes', ...base]);
    assert.equal(retried.code, 0, retried.err);
    const discarded = await cli(['dlq', 'discard', ids[1] as string, '--yes', ...base]);
    assert.equal(discarded.code, 0, discarded.err);
    const { rows } = await db.pool.query<{ dead: boolean; published: boolean }>(
      `SELECT dead_at IS NOT NULL AS dead, published_at IS NOT NULL AS published FROM ${s}.outbox_events WHERE id = ANY ($1::uuid[]) ORDER BY seq`,
      [ids],
    );
    assert.deepEqual(rows, [
      { dead: false, published: false },
      { dead: true, published: true },
    ]);
    const dry = await cli(['migrate', '--dry-run', '--json', ...base]);
    assert.equal(dry.code, 0, dry.err);
    assert.deepEqual(JSON.parse(dry.out).wouldApply, []);
    const doctor = await cli(['doctor', ...base, '--nats-url', 'nats://127.0.0.1:4222', '--json']);
    const report = JSON.parse(doctor.out) as { findings: Array<{ check: string; status: string }> };
    assert.equal(report.findings.find((f) => f.check === 'migrations')?.status, 'ok', doctor.out);
    // Changing the retention is the owner's: it runs the migrations (CREATE) too.
    const retention = await cli(['migrate', '--retention', '3d', ...base]);
    assert.notEqual(retention.code, 0);
  });
});
