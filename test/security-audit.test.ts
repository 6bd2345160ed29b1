// The audit trail no role can forge (issue 42 item 4): as the relay's role, an INSERT into
// operator_actions with a date three days back, actor "alice (on-call lead)", db_role
// ferry_admin and via console was accepted as given. Every part migrated into one schema, one
// LOGIN role per part holding exactly what `ferry migrate --print-grants` prints, plus a relay
// role holding what an earlier Ferry granted (INSERT, upgraded by outbox migration 000017) and
// a role given `GRANT ALL ON ALL TABLES IN SCHEMA` after it: each tries to write the trail
// directly, and the recording function is shown to set the time and the role itself.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { bossSchemaFor, idempotencyBossSchemaFor, quoteIdentifier, relayBossSchemaFor, SQLSTATE, sqlState } from '@ferry/core';
import { createTestDatabase, type TestDatabase, uniqueName } from '@ferry/testkit';
import pg from 'pg';
import { setFailed } from './delivery-state.js';
import { ferry } from './ops-helpers.js';
import { publishEvents } from './relay-helpers.js';
import { outcome, roleUrl } from './role-helpers.js';

const DENIED = SQLSTATE.insufficientPrivilege;
const RECORD_ARGS = 'text, text, text, jsonb, integer, text';

describe('the audit trail: no role writes operator_actions but through the function that sets at and db_role', () => {
  let db: TestDatabase;
  let s: string;
  const roles = {
    publisher: uniqueName('ap'),
    relay: uniqueName('ar'),
    inbox: uniqueName('ai'),
    idempotency: uniqueName('aid'),
    reader: uniqueName('ard'),
    console: uniqueName('ac'),
    /** Holds what an earlier Ferry's relay grants gave (SELECT, INSERT), from before outbox migration 000017. */
    oldRelay: uniqueName('aor'),
    /** Given every table of the schema after 000017, the way a DBA's blanket grant does. */
    grantedAll: uniqueName('aga'),
    /** A login that is a member of the relay's role and acts through SET ROLE. */
    member: uniqueName('am'),
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

  before(async () => {
    db = await createTestDatabase({ prefix: 'sec_audit', migrate: [] });
    await db.pool.query(`DROP SCHEMA ${quoteIdentifier(db.schema)}`);
    s = quoteIdentifier(db.schema);
    const base = ['--database-url', db.url, '--schema', db.schema];
    for (const extra of [
      ['--lanes', '2', '--boss'],
      ['--inbox', '--boss'],
      ['--idempotency', '--boss'],
    ]) {
      const r = await ferry(['migrate', ...base, ...extra]);
      assert.equal(r.code, 0, r.err);
    }
    for (const role of Object.values(roles)) await db.pool.query(`CREATE ROLE ${quoteIdentifier(role)} LOGIN`);

    // An earlier Ferry: the schema before 000017, and the relay grants of that time on the audit table.
    await db.pool.query(`DROP TRIGGER operator_actions_guard ON ${s}.operator_actions`);
    await db.pool.query(`DROP FUNCTION ${s}.operator_actions_guard(), ${s}.record_operator_action(${RECORD_ARGS})`);
    await db.pool.query(`DELETE FROM ${s}.migrations WHERE migration_set = 'outbox' AND version = 17`);
    await db.pool.query(`GRANT USAGE ON SCHEMA ${s} TO ${quoteIdentifier(roles.oldRelay)}`);
    await db.pool.query(`GRANT SELECT, INSERT ON ${s}.operator_actions TO ${quoteIdentifier(roles.oldRelay)}`);
    // The upgrade.
    const upgrade = await ferry(['migrate', ...base]);
    assert.equal(upgrade.code, 0, upgrade.err);
    assert.match(upgrade.out, /applied 17 operator_actions_record/);

    const grants: Array<[string, string[]]> = [
      [roles.publisher, ['--for', 'publisher']],
      [roles.relay, ['--for', 'relay']],
      [roles.inbox, ['--for', 'inbox', '--consumer', 'billing']],
      [roles.idempotency, ['--for', 'idempotency']],
      [roles.reader, ['--for', 'reader']],
      [roles.console, ['--for', 'console']],
    ];
    for (const [role, args] of grants) {
      const r = await ferry(['migrate', '--print-grants', '--role', role, '--schema', db.schema, ...args]);
      assert.equal(r.code, 0, r.err);
      await db.pool.query(r.out);
    }
    await db.pool.query(`GRANT USAGE ON SCHEMA ${s} TO ${quoteIdentifier(roles.grantedAll)}`);
    await db.pool.query(`GRANT ALL ON ALL TABLES IN SCHEMA ${s} TO ${quoteIdentifier(roles.grantedAll)}`);
    await db.pool.query(`GRANT ${quoteIdentifier(roles.relay)} TO ${quoteIdentifier(roles.member)}`);
    // A row to try UPDATE and DELETE on.
    await db.pool.query(`SELECT ${s}.record_operator_action('owner', 'cli', 'dlq.retry', '{}', 0, 'ok')`);
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

  test('audit - no role inserts, updates, deletes or truncates operator_actions directly: the forged row of issue 42 is refused', async () => {
    const forged = `INSERT INTO ${s}.operator_actions (at, actor, db_role, via, action, filter, rows, outcome)
      VALUES (now() - interval '3 days', 'alice (on-call lead)', 'ferry_admin', 'console', 'dlq.discard', '{"ids":[]}', 3, 'ok')`;
    const refused: string[] = [];
    for (const [name, role] of Object.entries(roles)) {
      for (const sql of [
        forged,
        `UPDATE ${s}.operator_actions SET at = at - interval '3 days', actor = 'alice (on-call lead)', db_role = 'ferry_admin'`,
        `DELETE FROM ${s}.operator_actions`,
        `TRUNCATE ${s}.operator_actions`,
      ]) {
        const got = await outcome(as(role), sql);
        if (got !== DENIED) refused.push(`${name}: ${sql.split(' ').slice(0, 3).join(' ')} → ${got}`);
      }
    }
    // The member of the relay's role, acting as it.
    const client = await as(roles.member).connect();
    try {
      await client.query(`SET ROLE ${quoteIdentifier(roles.relay)}`);
      await assert.rejects(client.query(forged), (err) => sqlState(err) === DENIED);
    } finally {
      await client.query('RESET ROLE').catch(() => {});
      client.release();
    }
    assert.deepEqual(refused, [], refused.join('\n'));
    const { rows } = await db.pool.query(`SELECT actor, db_role = session_user::text AS owners FROM ${s}.operator_actions ORDER BY id`);
    assert.deepEqual(rows, [{ actor: 'owner', owners: true }], 'the owner’s one row, unchanged');
  });

  test('audit - no role holds a write privilege on the table; the relay (and the upgraded one) hold EXECUTE on the function, no other part does', async () => {
    const { rows } = await db.pool.query<{ role: string; writes: string[]; execute: boolean }>(
      `SELECT r.role,
              array_remove(ARRAY[
                CASE WHEN has_table_privilege(r.role, $1, 'INSERT') THEN 'INSERT' END,
                CASE WHEN has_any_column_privilege(r.role, $1, 'INSERT') THEN 'INSERT (column)' END,
                CASE WHEN has_any_column_privilege(r.role, $1, 'UPDATE') THEN 'UPDATE' END,
                CASE WHEN has_table_privilege(r.role, $1, 'DELETE') THEN 'DELETE' END,
                CASE WHEN has_table_privilege(r.role, $1, 'TRUNCATE') THEN 'TRUNCATE' END,
                CASE WHEN has_table_privilege(r.role, $1, 'TRIGGER') THEN 'TRIGGER' END], NULL) AS writes,
              has_function_privilege(r.role, $2, 'EXECUTE') AS execute
         FROM unnest($3::text[]) AS r(role) ORDER BY r.role`,
      [
        `${s}.operator_actions`,
        `${s}.record_operator_action(${RECORD_ARGS})`,
        [roles.publisher, roles.relay, roles.inbox, roles.idempotency, roles.reader, roles.console, roles.oldRelay],
      ],
    );
    const byRole = new Map(rows.map((r) => [r.role, r]));
    for (const [name, role] of Object.entries(roles)) {
      const r = byRole.get(role);
      if (!r) continue;
      assert.deepEqual(r.writes, [], `${name} holds no write on operator_actions`);
      assert.equal(r.execute, name === 'relay' || name === 'oldRelay', `${name}: EXECUTE on record_operator_action`);
    }
    for (const role of [roles.publisher, roles.inbox, roles.idempotency, roles.reader, roles.console]) {
      assert.equal(await outcome(as(role), `SELECT ${s}.record_operator_action('x', 'cli', 'dlq.retry', '{}', 0, 'ok')`), DENIED, role);
    }
  });

  test('audit - the function sets at and db_role itself: a caller can pass neither, nor backdate by holding its transaction, nor hide behind SET ROLE', async () => {
    const relay = as(roles.relay);
    // No way to hand the function a time or a role: no such signature.
    for (const extra of [`, now() - interval '3 days'`, `, now() - interval '3 days', 'ferry_admin'`]) {
      assert.equal(
        await outcome(relay, `SELECT ${s}.record_operator_action('alice (on-call lead)', 'console', 'dlq.discard', '{}', 3, 'ok'${extra})`),
        SQLSTATE.undefinedFunction,
        extra,
      );
    }
    assert.equal(
      await outcome(
        relay,
        `SELECT ${s}.record_operator_action(p_actor => 'a', p_via => 'cli', p_action => 'x', p_filter => '{}', p_rows => 0, p_outcome => 'ok', at => now())`,
      ),
      SQLSTATE.undefinedFunction,
    );
    // In a transaction opened before: the row's time is the clock's at the call, not the transaction's start.
    const client = await relay.connect();
    let times: { started: Date; before: Date; after: Date };
    let id: string;
    try {
      await client.query('BEGIN');
      const started = (await client.query<{ t: Date }>('SELECT now() AS t')).rows[0]?.t as Date;
      const before = (await client.query<{ t: Date }>('SELECT clock_timestamp() AS t')).rows[0]?.t as Date;
      const r = await client.query<{ id: string }>(
        `SELECT ${s}.record_operator_action('alice (on-call lead)', 'console', 'dlq.discard', '{"ids":[]}', 3, 'ok')::text AS id`,
      );
      id = r.rows[0]?.id as string;
      const after = (await client.query<{ t: Date }>('SELECT clock_timestamp() AS t')).rows[0]?.t as Date;
      await client.query('COMMIT');
      times = { started, before, after };
    } finally {
      client.release();
    }
    const row = (
      await db.pool.query<{ at: Date; actor: string; db_role: string; via: string; after_start: boolean }>(
        `SELECT at, actor, db_role, via, at > $2::timestamptz AS after_start FROM ${s}.operator_actions WHERE id = $1::bigint`,
        [id, times.started],
      )
    ).rows[0];
    assert.ok(row, 'the recorded row');
    // The caller's claims stay as given; the database's facts are the database's.
    assert.equal(row.actor, 'alice (on-call lead)');
    assert.equal(row.via, 'console');
    assert.equal(row.db_role, roles.relay);
    assert.ok(row.after_start, 'later than the transaction’s start');
    assert.ok(row.at.getTime() >= times.before.getTime() && row.at.getTime() <= times.after.getTime(), JSON.stringify({ row, times }));

    // A login that is a member of the relay's role and acts as it: the trail names the login.
    const member = await as(roles.member).connect();
    try {
      await member.query(`SET ROLE ${quoteIdentifier(roles.relay)}`);
      await assert.rejects(
        member.query(`SET SESSION AUTHORIZATION ${quoteIdentifier(roles.publisher)}`),
        (err) => sqlState(err) === DENIED,
      );
      const r = await member.query<{ id: string }>(
        `SELECT ${s}.record_operator_action('alice (on-call lead)', 'console', 'dlq.discard', '{}', 1, 'ok')::text AS id`,
      );
      const { rows } = await db.pool.query(`SELECT db_role FROM ${s}.operator_actions WHERE id = $1::bigint`, [r.rows[0]?.id]);
      assert.deepEqual(rows, [{ db_role: roles.member }]);
    } finally {
      await member.query('RESET ROLE').catch(() => {});
      member.release();
    }
  });

  test('audit - ferry dlq retry and discard as the relay role, and as the role an earlier Ferry granted, record their rows through the function', async () => {
    const ids = await publishEvents(db.pool, db.schema, 'sec.audit', 2, { keys: 2 });
    assert.equal(await setFailed(db.pool, db.schema, 'o.id = ANY ($1::uuid[])', [ids], { attempts: 5, lastError: 'boom', dead: true }), 2);
    // The role of an earlier Ferry, upgraded by 000017, with the relay's other grants of today.
    const relayGrants = await ferry(['migrate', '--print-grants', '--role', roles.oldRelay, '--schema', db.schema, '--for', 'relay']);
    await db.pool.query(relayGrants.out.replace(/^GRANT EXECUTE ON FUNCTION [^\n]*record_operator_action[^\n]*\n/m, ''));
    const runs: Array<[string, string, string]> = [
      [roles.relay, 'retry', ids[0] as string],
      [roles.oldRelay, 'discard', ids[1] as string],
    ];
    for (const [role, action, id] of runs) {
      const r = await ferry(['dlq', action, id, '--yes', '--database-url', roleUrl(db.url, role), '--schema', db.schema]);
      assert.equal(r.code, 0, `${role} ${action}: ${r.err}`);
    }
    const { rows } = await db.pool.query<{ db_role: string; via: string; action: string; rows: number; recent: boolean }>(
      `SELECT db_role, via, action, rows, at > clock_timestamp() - interval '1 minute' AS recent
         FROM ${s}.operator_actions WHERE action LIKE 'dlq.%' AND actor <> 'owner' AND actor NOT LIKE 'alice%' ORDER BY id`,
    );
    assert.deepEqual(rows, [
      { db_role: roles.relay, via: 'cli', action: 'dlq.retry', rows: 1, recent: true },
      { db_role: roles.oldRelay, via: 'cli', action: 'dlq.discard', rows: 1, recent: true },
    ]);
  });
});
