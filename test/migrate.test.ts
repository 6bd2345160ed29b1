import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  listMigrations,
  MigrationError,
  migrate,
  migrationSql,
  migrationStatus,
  quoteIdentifier,
  ValidationError,
  withTransaction,
} from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { applyWithPsql, databaseUrl, undoPendingTable, uniqueName } from '@ferry/testkit';
import pg from 'pg';

/** The outbox migrations after 000015, which a schema taken back to version 14 (undoPendingTable) applies again. */
const AFTER_15 = listMigrations('outbox')
  .map((m) => m.version)
  .filter((v) => v > 15);

let pool: pg.Pool;
const schemas: string[] = [];
const fresh = (p = 'mig') => {
  const s = uniqueName(p);
  schemas.push(s);
  return s;
};
before(() => {
  pool = new pg.Pool({ connectionString: databaseUrl(), max: 6 });
});
after(async () => {
  for (const s of schemas) await pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(s)} CASCADE`);
  await pool.end();
});

async function tables(schema: string): Promise<string[]> {
  const r = await pool.query('SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1', [schema]);
  return r.rows.map((x) => x.table_name);
}

describe('migrate', () => {
  test('migrate - creates the outbox tables once and is a no-op after', async () => {
    const schema = fresh();
    const first = await migrate({ pool, schema });
    assert.deepEqual(
      first.applied.map((m) => m.version),
      listMigrations('outbox').map((m) => m.version),
    );
    assert.ok((await tables(schema)).includes('outbox'));
    assert.ok((await tables(schema)).includes('key_versions'));
    // 000007 rewrote the publish check as PL/pgSQL (its plan kept per session) from 000005's stored rule text.
    const { rows: check } = await pool.query<{ lang: string }>(
      `SELECT l.lanname AS lang FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
        WHERE p.oid = $1::regprocedure`,
      [`${quoteIdentifier(schema)}.publish_events_ok(text[], text[], text[], text[], text[], jsonb[])`],
    );
    assert.deepEqual(check, [{ lang: 'plpgsql' }]);
    const second = await migrate({ pool, schema });
    assert.deepEqual(second.applied, []);
    assert.deepEqual(await migrationStatus(pool, { schema }), { current: first.version, latest: first.version });
  });

  test('migrate - 000008: the per-event check is the batch check, event by event, and PostgreSQL can inline it', async () => {
    const schema = fresh();
    await migrate({ pool, schema });
    const s = quoteIdentifier(schema);
    // LANGUAGE sql with no SET clause and no subquery: what lets the planner inline it into publish_event.
    const { rows: fn } = await pool.query(
      `SELECT l.lanname AS lang, p.proconfig, p.prosecdef FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang WHERE p.oid = $1::regprocedure`,
      [`${s}.publish_event_ok(text, text, text, text, text, jsonb)`],
    );
    assert.deepEqual(fn, [{ lang: 'sql', proconfig: null, prosecdef: false }]);
    const { rows: plan } = await pool.query<{ 'QUERY PLAN': string }>(
      `EXPLAIN (VERBOSE, COSTS OFF) SELECT ${s}.publish_event_ok(g::text, 'orders.placed', 'T', 's', 'application/json', '{}') FROM generate_series(1, 2) g`,
    );
    const planText = plan.map((r) => r['QUERY PLAN']).join('\n');
    assert.doesNotMatch(planText, /publish_event_ok\(/, 'inlined: the plan holds its expression, not a call');
    // 000016's reserved-subject rule, called from it, is inlined too.
    assert.doesNotMatch(planText, /publish_subject_reserved\(/, 'the reserved-subject rule inlined as well');
    assert.match(planText, /char_length/);
    const good = { k: 'order-1', su: 'orders.placed', ty: 'OrderPlaced', so: 'svc', ct: 'application/json', h: {} as unknown };
    const cases: Array<[string, Partial<typeof good>, boolean]> = [
      ['valid', {}, true],
      // JSON.parse: an object literal's __proto__ sets the prototype and makes no property.
      ['valid headers', { h: JSON.parse('{"traceparent": "00-x", "constructor": "c", "__proto__": "p"}') }, true],
      ['null headers', { h: null }, true],
      ['LF in key', { k: 'a\nb' }, false],
      ['edge space in type', { ty: ' T' }, false],
      ['NBSP-edged source', { so: 'svc\u00a0' }, false],
      ['wildcard subject', { su: 'orders.*' }, false],
      ['empty token', { su: 'orders..placed' }, false],
      ['CR in content type', { ct: 'a\rb' }, false],
      ['reserved ce- header', { h: { 'ce-id': 'x' } }, false],
      ['reserved Nats- header', { h: { 'NATS-Msg-Id': 'x' } }, false],
      ['content-type header', { h: { 'Content-Type': 'x' } }, false],
      ['same header twice', { h: { a: '1', A: '2' } }, false],
      ['number header value', { h: { a: 1 } }, false],
      ['header array', { h: ['a'] }, false],
      ['65 headers', { h: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`h${i}`, 'v'])) }, false],
      ['bad header name', { h: { 'a b': 'v' } }, false],
      ['long key', { k: 'k'.repeat(257) }, false],
      ['JetStream API subject', { su: '$JS.API.STREAM.DELETE.ORDERS' }, false],
      ['inbox subject', { su: '_INBOX.abc' }, false],
      ['lowercase _inbox subject', { su: '_inbox.abc' }, true],
      ['$ in a later token', { su: 'orders.$JS' }, true],
    ];
    // The short path (generated id, next version) sends a failing event the long way, whose error names the field.
    await assert.rejects(
      pool.query(
        `SELECT * FROM ${s}.publish_event(gen_random_uuid(), 'k', NULL, 'a.b', 't', 's', 'application/json', '\\x00', '{"ce-id": "x"}', now(), NULL, false)`,
      ),
      (err: { code?: string; column?: string }) => err.code === '22023' && err.column === 'headers.ce-id',
    );
    await assert.rejects(
      pool.query(
        `SELECT * FROM ${s}.publish_events(ARRAY[gen_random_uuid(), gen_random_uuid()], ARRAY['k', 'k'], ARRAY[NULL, NULL]::bigint[],
           ARRAY['a.b', 'a.*'], ARRAY['t', 't'], ARRAY['s', 's'], ARRAY['application/json', 'application/json'],
           ARRAY['\\x00', '\\x00']::bytea[], ARRAY['{}', '{}']::jsonb[], ARRAY[now(), now()], NULL, false)`,
      ),
      (err: { code?: string; column?: string }) => err.code === '22023' && err.column === 'events[1].subject',
    );
    const { rows: written } = await pool.query(`SELECT count(*)::int AS n FROM ${s}.outbox`);
    assert.deepEqual(written, [{ n: 0 }]);
    for (const [what, patch, ok] of cases) {
      const e = { ...good, ...patch };
      const h = e.h === null ? null : JSON.stringify(e.h);
      const { rows } = await pool.query<{ one: boolean; batch: boolean }>(
        `SELECT ${s}.publish_event_ok($1, $2, $3, $4, $5, $6::jsonb) AS one,
                ${s}.publish_events_ok(ARRAY[$1], ARRAY[$2], ARRAY[$3], ARRAY[$4], ARRAY[$5], ARRAY[$6::jsonb]) AS batch`,
        [e.k, e.su, e.ty, e.so, e.ct, h],
      );
      assert.deepEqual(rows[0], { one: ok, batch: ok }, what);
    }
  });

  test('migrate - two concurrent runs: one applies, the other waits and does nothing', async () => {
    const schema = fresh();
    const results = await Promise.all([migrate({ pool, schema }), migrate({ pool, schema }), migrate({ pool, schema })]);
    const applied = results.filter((r) => r.applied.length > 0);
    assert.equal(applied.length, 1);
    const count = await pool.query(`SELECT count(*)::int AS n FROM ${quoteIdentifier(schema)}.migrations`);
    assert.equal(count.rows[0].n, listMigrations('outbox').length);
  });

  test('migrate - a database migrated by a newer Ferry is refused', async () => {
    const schema = fresh();
    await migrate({ pool, schema });
    await pool.query(`INSERT INTO ${quoteIdentifier(schema)}.migrations (migration_set, version, name) VALUES ('outbox', 999, 'future')`);
    await assert.rejects(
      migrate({ pool, schema }),
      (e: unknown) => e instanceof MigrationError && /newer Ferry/.test(e.message) && e.message.includes('999'),
    );
  });

  test('migrate - an invalid schema name is refused before anything is created', async () => {
    for (const bad of ['x"; drop table t; --', 'Ferry', 'ferrу', 'a'.repeat(10_000), '']) {
      await assert.rejects(migrate({ pool, schema: bad }), (e: unknown) => e instanceof ValidationError && e.field === 'schema');
    }
    const r = await pool.query(`SELECT count(*)::int AS n FROM pg_namespace WHERE nspname LIKE 'x"%' OR nspname = 'Ferry'`);
    assert.equal(r.rows[0].n, 0);
  });

  test('migrate - lanes are fixed by the first migrate and every row lands in one', async () => {
    const schema = fresh();
    await migrate({ pool, schema, lanes: 4 });
    await assert.rejects(migrate({ pool, schema, lanes: 8 }), (e: unknown) => e instanceof MigrationError && /4 lanes/.test(e.message));
    await migrate({ pool, schema }); // no lanes given: keeps 4
    await pool.query(
      `INSERT INTO ${quoteIdentifier(schema)}.outbox (id, key, version, subject, type, source, content_type, data, occurred_at)
       SELECT gen_random_uuid(), 'key-' || i, 1, 's', 't', 'src', 'application/json', '\\x7b7d', now() FROM generate_series(1, 400) i`,
    );
    const r = await pool.query(`SELECT lane, count(*)::int AS n FROM ${quoteIdentifier(schema)}.outbox GROUP BY lane ORDER BY lane`);
    assert.deepEqual(
      r.rows.map((x) => x.lane),
      [0, 1, 2, 3],
    );
    assert.ok(
      r.rows.every((x) => x.n > 50),
      'keys spread over the lanes',
    );
    await assert.rejects(migrate({ pool, schema: fresh(), lanes: 0 }), ValidationError);
  });

  test('migrate - the printed SQL applied by hand is recognised by migrate', async () => {
    const schema = fresh();
    const text = migrationSql({ schema });
    assert.match(text, new RegExp(`CREATE TABLE "${schema}".outbox`));
    // The outbox's index builds are concurrent, outside a transaction, and the script says why.
    assert.match(text, /COMMIT;\n-- Outside a transaction: CREATE INDEX CONCURRENTLY cannot run in one\./);
    assert.match(text, new RegExp(`CREATE INDEX CONCURRENTLY outbox_pending_key_idx ON "${schema}".outbox`));
    assert.match(text, new RegExp(`CREATE INDEX CONCURRENTLY outbox_retrying_key_idx ON "${schema}".outbox`));
    assert.match(
      text,
      new RegExp(`CREATE INDEX CONCURRENTLY outbox_failed_idx ON "${schema}".outbox \\(key, seq\\) INCLUDE \\(lane, dead_at\\)`),
    );
    // Only 000001 builds indexes on the outbox in a transaction: the one that creates the (empty) table.
    const inTransaction = [...text.matchAll(/^CREATE INDEX (?!CONCURRENTLY)(\w+) ON "[^"]+"\.outbox /gm)].map((m) => m[1]);
    assert.deepEqual(inTransaction, ['outbox_pending_lane_idx', 'outbox_published_at_idx']);
    applyWithPsql(databaseUrl(), text);
    const again = await migrate({ pool, schema });
    assert.deepEqual(again.applied, []);
  });

  test('migrate - 000015 gives the roles granted on the outbox what they need on the new tables: a relay its delivery state, a reader SELECT', async () => {
    const schema = fresh();
    const s = quoteIdentifier(schema);
    await migrate({ pool, schema });
    await undoPendingTable(pool, schema);
    const relay = uniqueName('mig_relay');
    const reader = uniqueName('mig_reader');
    const stranger = uniqueName('mig_none');
    const states = uniqueName('mig_states');
    const roles = [relay, reader, stranger, states];
    try {
      for (const role of roles) await pool.query(`CREATE ROLE ${quoteIdentifier(role)} NOLOGIN`);
      // As ferry migrate --print-grants granted them before this release.
      await pool.query(
        `GRANT SELECT, DELETE, UPDATE (published_at, attempts, next_attempt_at, last_error, dead_at) ON ${s}.outbox TO ${quoteIdentifier(relay)}`,
      );
      await pool.query(`GRANT SELECT ON ${s}.outbox TO ${quoteIdentifier(reader)} WITH GRANT OPTION`);
      // A dashboard's role that could read the delivery state and the key only: not the events' data.
      await pool.query(`GRANT SELECT (key, published_at, attempts, last_error) ON ${s}.outbox TO ${quoteIdentifier(states)}`);
      assert.deepEqual(
        (await migrate({ pool, schema })).applied.map((m) => m.version),
        [15, ...AFTER_15],
      );
      const { rows } = await pool.query(
        `SELECT r.role,
                has_table_privilege(r.role, $1, 'SELECT') AS pending_select, has_table_privilege(r.role, $1, 'DELETE') AS pending_delete,
                has_column_privilege(r.role, $1, 'attempts', 'UPDATE') AS pending_update_state,
                has_column_privilege(r.role, $1, 'seq', 'UPDATE') OR has_column_privilege(r.role, $1, 'key', 'UPDATE') AS pending_update_which,
                has_table_privilege(r.role, $1, 'INSERT') AS pending_insert,
                has_table_privilege(r.role, $2, 'SELECT') AS published_select, has_table_privilege(r.role, $2, 'INSERT') AS published_insert,
                has_table_privilege(r.role, $2, 'DELETE') AS published_delete, has_table_privilege(r.role, $3, 'SELECT') AS view_select,
                has_table_privilege(r.role, $3, 'SELECT WITH GRANT OPTION') AS view_grant
           FROM unnest($4::text[]) WITH ORDINALITY AS r(role, n) ORDER BY r.n`,
        [`${schema}.outbox_pending`, `${schema}.outbox_published`, `${schema}.outbox_events`, roles],
      );
      const none = {
        pending_select: false,
        pending_delete: false,
        pending_update_state: false,
        pending_update_which: false,
        pending_insert: false,
        published_select: false,
        published_insert: false,
        published_delete: false,
        view_select: false,
        view_grant: false,
      };
      assert.deepEqual(rows, [
        {
          role: relay,
          ...none,
          pending_select: true,
          pending_delete: true,
          pending_update_state: true,
          published_select: true,
          published_insert: true,
          view_select: true,
        },
        { role: reader, ...none, pending_select: true, published_select: true, view_select: true, view_grant: true },
        { role: stranger, ...none },
        { role: states, ...none, pending_select: true, published_select: true },
      ]);
    } finally {
      for (const role of roles) {
        await pool.query(`DROP OWNED BY ${quoteIdentifier(role)}`).catch(() => {});
        await pool.query(`DROP ROLE IF EXISTS ${quoteIdentifier(role)}`);
      }
    }
  });

  test('migrate - 000004 builds its outbox index concurrently: a publish commits while the build waits on an open writer', async () => {
    const schema = fresh();
    const s = quoteIdentifier(schema);
    await migrate({ pool, schema });
    // The database as a release at outbox version 3 left it, but with the later migrations up to 14 in
    // place: the runner applies what is not recorded, so 000004 runs, then 000015.
    await undoPendingTable(pool, schema);
    await pool.query(`DROP INDEX ${s}.outbox_pending_key_idx`);
    await pool.query(`CREATE INDEX outbox_pending_lane_idx ON ${s}.outbox (lane, seq) WHERE published_at IS NULL`);
    await pool.query(`DELETE FROM ${s}.migrations WHERE migration_set = 'outbox' AND version = 4`);
    const publisher = createPublisher({ schema, source: 'migrate-test' });
    const event = (key: string) => ({ subject: 'mig.orders', key, type: 'OrderPlaced', data: { key } });
    // A writer whose transaction stays open: an index build has to wait for it.
    const open = await pool.connect();
    let running: ReturnType<typeof migrate> | undefined;
    try {
      await open.query('BEGIN');
      await publisher.publish(open, event('open-writer'));
      running = migrate({ pool, schema });
      await new Promise((resolve) => setTimeout(resolve, 500));
      // Built in a transaction, the index waited for the open writer holding a SHARE lock request that
      // queued every later publish behind it: this one would wait until lock_timeout.
      const started = performance.now();
      await withTransaction(pool, async (tx) => {
        await tx.query("SET LOCAL lock_timeout = '1s'");
        await publisher.publish(tx, event('during-build'));
      });
      const publishMs = performance.now() - started;
      assert.ok(publishMs < 1_000, `the publish took ${Math.round(publishMs)} ms during the build`);
      await open.query('COMMIT');
      const result = await running;
      assert.deepEqual(
        result.applied.map((m) => m.version),
        [4, 15, ...AFTER_15],
      );
    } finally {
      await open.query('ROLLBACK').catch(() => {});
      open.release();
      await running?.catch(() => {}); // a failed assertion must not leave the build running into after()'s DROP
    }
    const { rows } = await pool.query<{ relname: string; valid: boolean }>(
      `SELECT c.relname, i.indisvalid AS valid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE i.indrelid = ANY ($1::regclass[]) AND c.relname LIKE 'outbox_pending%' ORDER BY 1`,
      [[`${s}.outbox`, `${s}.outbox_pending`]],
    );
    // 000004's index was valid when 000015 ran: 000015 dropped it with the outbox's delivery columns.
    assert.deepEqual(
      rows,
      [
        { relname: 'outbox_pending_failed_idx', valid: true },
        { relname: 'outbox_pending_pkey', valid: true },
        { relname: 'outbox_pending_walk_idx', valid: true },
      ],
      'the pending rows have their own indexes, and the outbox none over delivery state',
    );
    assert.deepEqual(
      (await pool.query(`SELECT o.key FROM ${s}.outbox_pending p JOIN ${s}.outbox o USING (seq) ORDER BY p.seq`)).rows.map((r) => r.key),
      ['open-writer', 'during-build'],
      'both events published around the build are pending',
    );
  });

  test('migrate - a new schema migrates at once beside a long transaction elsewhere in the database (no concurrent build waits for it)', async () => {
    const schema = fresh();
    // Any application's transaction holding a snapshot: CREATE INDEX CONCURRENTLY would wait for it to end.
    const other = await pool.connect();
    try {
      await other.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await other.query('SELECT 1');
      const done = migrate({ pool, schema });
      const timeout = new Promise<'waiting'>((resolve) => setTimeout(() => resolve('waiting'), 10_000).unref());
      const first = await Promise.race([done.then(() => 'migrated' as const), timeout]);
      assert.equal(first, 'migrated', 'the first migrate of a new schema does not wait for an unrelated open transaction');
      const { rows } = await pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
          WHERE i.indrelid = $1::regclass AND NOT i.indisvalid`,
        [`${quoteIdentifier(schema)}.outbox`],
      );
      assert.equal(rows[0]?.n, 0, 'every index valid');
    } finally {
      await other.query('ROLLBACK').catch(() => {});
      other.release();
    }
  });

  test('migrate - the inbox set migrates on its own, beside or apart from the outbox', async () => {
    const schema = fresh();
    const r = await migrate({ pool, schema, set: 'inbox' });
    assert.ok(r.applied.length > 0);
    assert.deepEqual(await tables(schema), ['inbox_early', 'inbox_instances', 'inbox_messages', 'inbox_versions', 'migrations']);
    await migrate({ pool, schema, set: 'outbox' });
    assert.ok((await tables(schema)).includes('outbox'));
    assert.deepEqual((await migrate({ pool, schema, set: 'inbox' })).applied, []);
  });
});
