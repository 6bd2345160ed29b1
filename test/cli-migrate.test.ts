import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { quoteIdentifier } from '@ferry/core';
import { applyWithPsql, databaseUrl, undoPendingTable, uniqueName } from '@ferry/testkit';
import pg from 'pg';

const FERRY = fileURLToPath(new URL('../../apps/relay/bin/ferry.js', import.meta.url));
let pool: pg.Pool;
const schemas: string[] = [];
before(() => {
  pool = new pg.Pool({ connectionString: databaseUrl(), max: 2 });
});
after(async () => {
  for (const s of schemas) await pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(s)} CASCADE`);
  await pool.end();
});

function ferry(args: string[], env: Record<string, string | undefined> = {}) {
  const clean = { ...process.env, FERRY_DATABASE_URL: undefined, DATABASE_URL: undefined, FERRY_SCHEMA: undefined, ...env };
  const r = spawnSync(process.execPath, [FERRY, ...args], { env: clean as NodeJS.ProcessEnv, encoding: 'utf8', timeout: 30_000 });
  return { code: r.status, out: r.stdout, err: r.stderr };
}
async function schemaExists(s: string) {
  const r = await pool.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [s]);
  return r.rowCount === 1;
}

describe('ferry migrate', () => {
  test('ferry migrate - --help describes every option', () => {
    const r = ferry(['migrate', '--help']);
    assert.equal(r.code, 0);
    for (const opt of [
      '--database-url',
      '--schema',
      '--inbox',
      '--idempotency',
      '--lanes',
      '--print-sql',
      '--json',
      'FERRY_DATABASE_URL',
      'FERRY_SCHEMA',
    ]) {
      assert.ok(r.out.includes(opt), `help mentions ${opt}`);
    }
    const top = ferry(['--help']);
    assert.equal(top.code, 0);
    assert.match(top.out, /migrate/);
    assert.match(top.out, /Exit codes/);
  });

  test('ferry migrate - migrates, then reports the schema current', async () => {
    const schema = uniqueName('cli');
    schemas.push(schema);
    const first = ferry(['migrate', '--database-url', databaseUrl(), '--schema', schema]);
    assert.equal(first.code, 0, first.err);
    assert.match(first.out, /applied 1 outbox/);
    const second = ferry(['migrate', '--schema', schema, '--json'], { FERRY_DATABASE_URL: databaseUrl() });
    assert.equal(second.code, 0, second.err);
    assert.deepEqual(JSON.parse(second.out).applied, []);
    const third = ferry(['migrate', '--inbox'], { DATABASE_URL: databaseUrl(), FERRY_SCHEMA: schema });
    assert.equal(third.code, 0, third.err);
    assert.match(third.out, /inbox/);
  });

  test('ferry migrate - a hostile schema name exits 2 naming the value, and nothing is created', async () => {
    for (const bad of ['x"; drop table t; --', 'ＦＥＲＲＹ', 'a'.repeat(10_000)]) {
      const viaFlag = ferry(['migrate', '--database-url', databaseUrl(), '--schema', bad]);
      assert.equal(viaFlag.code, 2);
      assert.match(viaFlag.err, /schema/);
      assert.ok(viaFlag.err.includes(bad.slice(0, 20)), viaFlag.err);
      const viaEnv = ferry(['migrate', '--database-url', databaseUrl()], { FERRY_SCHEMA: bad });
      assert.equal(viaEnv.code, 2);
    }
    assert.equal(await schemaExists('x"; drop table t; --'), false);
  });

  test('ferry migrate - no database URL exits 2 with the fix', () => {
    const r = ferry(['migrate']);
    assert.equal(r.code, 2);
    assert.match(r.err, /FERRY_DATABASE_URL/);
    assert.equal(r.err.trim().split('\n').length, 1);
    const bad = ferry(['migrate', '--database-url', 'mysql://x']);
    assert.equal(bad.code, 2);
    const lanes = ferry(['migrate', '--database-url', databaseUrl(), '--lanes', 'many']);
    assert.equal(lanes.code, 2);
    assert.match(lanes.err, /lanes/);
  });

  test('ferry migrate - --print-sql prints the SQL and touches nothing', async () => {
    const schema = uniqueName('cli');
    const r = ferry(['migrate', '--print-sql', '--schema', schema, '--lanes', '8']);
    assert.equal(r.code, 0);
    assert.match(r.out, new RegExp(`CREATE TABLE "${schema}".outbox`));
    assert.match(r.out, /% 8/);
    assert.equal(await schemaExists(schema), false);
    // Issue 29: comments keep their words; before, the substitution turned them into '-- "cli_…" is replaced by …'.
    assert.match(r.out, /^-- .*:SCHEMA is replaced by the quoted schema name/m);
    assert.doesNotMatch(r.out, new RegExp(`^--.*"${schema}"`, 'm'), 'no comment line carries the schema name');
  });

  test('ferry migrate - --print-sql prints only what the database still needs (read from it, or --from-version), and it applies', async () => {
    const schema = uniqueName('cli');
    schemas.push(schema);
    const s = quoteIdentifier(schema);
    // A database at outbox version 2: the migrations after 2 are undone and unrecorded.
    assert.equal(ferry(['migrate', '--database-url', databaseUrl(), '--schema', schema]).code, 0);
    await undoPendingTable(pool, schema);
    // A dry run before the upgrade counts what the prune would take where the rows still keep published_at.
    await pool.query(
      `INSERT INTO ${s}.outbox (id, key, version, subject, type, source, content_type, data, headers, occurred_at, published_at)
       VALUES (gen_random_uuid(), 'k', 1, 'a.b', 't', 's', 'application/json', '\\x00', '{}', now(), now() - interval '2 hours')`,
    );
    const dry = ferry(['migrate', '--dry-run', '--json', '--retention', '1h', '--database-url', databaseUrl(), '--schema', schema]);
    assert.equal(dry.code, 0, dry.err);
    assert.equal((JSON.parse(dry.out) as { wouldPrune: number }).wouldPrune, 1, 'the row published two hours ago, at version 14');
    await pool.query(`DELETE FROM ${s}.outbox`);
    await pool.query(`DROP FUNCTION ${s}.publish_event, ${s}.publish_events, ${s}.event_digest CASCADE`);
    await pool.query(
      `DROP FUNCTION ${s}.publish_event_full, ${s}.publish_events_full, ${s}.publish_events_ok, ${s}.publish_check_event, ${s}.publish_check_text`,
    );
    await pool.query(`DROP FUNCTION ${s}.publish_event_ok, ${s}.publish_headers_ok, ${s}.publish_check_limits`);
    await pool.query(`DROP INDEX ${s}.outbox_pending_key_idx`);
    await pool.query(`CREATE INDEX outbox_pending_lane_idx ON ${s}.outbox (lane, seq) WHERE published_at IS NULL`);
    await pool.query(`DROP TABLE ${s}.published_ids, ${s}.relay_waiting, ${s}.relay_leases, ${s}.relay_instances, ${s}.operator_actions`);
    await pool.query(`DROP FUNCTION ${s}.relay_lease_floor`);
    await pool.query(`DELETE FROM ${s}.settings WHERE name IN ('retention_ms', 'relay_protocol_floor')`);
    await pool.query(`DELETE FROM ${s}.migrations WHERE migration_set = 'outbox' AND version > 2`);
    const fromDb = ferry(['migrate', '--print-sql', '--database-url', databaseUrl(), '--schema', schema]);
    assert.equal(fromDb.code, 0, fromDb.err);
    assert.match(fromDb.out, /from version 2 to/);
    assert.doesNotMatch(fromDb.out, /CREATE TABLE [^\n]*\.settings/, 'not the migrations it has');
    assert.match(fromDb.out, /000003_publish_functions/);
    const given = ferry(['migrate', '--print-sql', '--from-version', '2', '--schema', schema]);
    assert.equal(given.out, fromDb.out, '--from-version 2 prints the same');
    // A DBA applies it by hand: it runs on the version-2 database, and ferry migrate finds it current.
    applyWithPsql(databaseUrl(), fromDb.out);
    const after = ferry(['migrate', '--database-url', databaseUrl(), '--schema', schema]);
    assert.match(after.out, /is current/);
    const future = ferry(['migrate', '--print-sql', '--from-version', '999', '--schema', schema]);
    assert.equal(future.code, 3);
  });

  test('ferry migrate - a newer database exits 3, and the password never appears', async () => {
    const schema = uniqueName('cli');
    schemas.push(schema);
    assert.equal(ferry(['migrate', '--database-url', databaseUrl(), '--schema', schema]).code, 0);
    await pool.query(`INSERT INTO ${quoteIdentifier(schema)}.migrations (migration_set, version, name) VALUES ('outbox', 999, 'future')`);
    const withPassword = databaseUrl().replace('postgres://postgres@', 'postgres://postgres:s3cr3t-pw@');
    const r = ferry(['migrate', '--database-url', withPassword, '--schema', schema]);
    assert.equal(r.code, 3, r.err);
    assert.match(r.err, /newer Ferry/);
    assert.ok(!`${r.out}${r.err}`.includes('s3cr3t-pw'));
  });
});
