// Version skew (issue 29): a relay of an earlier release next to this one, against a schema this
// release migrated. The earlier release is real: the commit scripts/build-old-release.sh names,
// built once into a cache (.ci/run builds it before the tests; here it is built when missing).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, afterEach, before, describe, test } from 'node:test';
import { FERRY_RELEASE, listMigrations, migrate, migrationStatus, quoteIdentifier, RELAY_PROTOCOL, relayBossSchemaFor } from '@ferry/core';
import { FERRY_RELEASE as INBOX_RELEASE } from '@ferry/inbox';
import { FERRY_RELEASE as PUBLISHER_RELEASE } from '@ferry/publisher';
import { createRelay, lockNamespace, startConsole } from '@ferry/relay';
import {
  createTestDatabase,
  createTestStream,
  databaseUrl,
  natsUrl,
  type TestDatabase,
  type TestStream,
  undoPendingTable,
  uniqueName,
  waitFor,
} from '@ferry/testkit';
import pg from 'pg';
import { oldFerryBin, REPO, testRelayArgs } from './old-release.js';
import { ferry } from './ops-helpers.js';
import {
  assertExactlyOnceInKeyOrder,
  countPending,
  publishEvents,
  type RelayProcess,
  readStream,
  spawnRelay,
  steadyLoad,
} from './relay-helpers.js';

/** The outbox migrations after 000015, which a schema taken back to version 14 (undoPendingTable) applies again. */
const AFTER_15 = listMigrations('outbox')
  .map((m) => m.version)
  .filter((v) => v > 15);

const TERM_MS = 2_000;

interface StatusInstance {
  instance: string;
  release: string | null;
  protocol: number | null;
  belowFloor: boolean;
  lanes: number[];
}

describe('version skew: an earlier relay on a schema migrated by this release', () => {
  let oldBin: string;
  let stream: TestStream;
  const procs: RelayProcess[] = [];
  const schemas: string[] = [];
  let admin: pg.Pool;

  function relayArgs(schema: string): string[] {
    return testRelayArgs(schema, TERM_MS);
  }

  function startOld(schema: string): RelayProcess {
    const p = spawnRelay(relayArgs(schema), {}, oldBin);
    procs.push(p);
    return p;
  }

  function startNew(schema: string): RelayProcess {
    const p = spawnRelay(relayArgs(schema));
    procs.push(p);
    return p;
  }

  async function stopAll(): Promise<void> {
    for (const p of procs.splice(0)) {
      if (p.proc.exitCode === null && p.proc.signalCode === null) {
        p.proc.kill('SIGKILL');
        await p.exited;
      }
    }
  }

  async function streamCount(): Promise<number> {
    return (await stream.jsm.streams.info(stream.name)).state.messages;
  }

  async function statusInstances(schema: string): Promise<{ instances: StatusInstance[]; mixedReleases: string | null }> {
    const r = await ferry(['status', '--database-url', databaseUrl(), '--schema', schema, '--json']);
    assert.equal(r.code, 0, r.err);
    return r.json<{ instances: StatusInstance[]; mixedReleases: string | null }>();
  }

  /** Instance ids of relays with a heartbeat row, by whether they report a release. */
  async function heartbeats(schema: string): Promise<{ old: string[]; current: string[] }> {
    const { rows } = await admin.query<{ instance: string; release: string | null }>(
      `SELECT instance, release FROM ${quoteIdentifier(schema)}.relay_instances WHERE expires_at > now()`,
    );
    return {
      old: rows.filter((r) => r.release === null).map((r) => r.instance),
      current: rows.filter((r) => r.release !== null).map((r) => r.instance),
    };
  }

  before(async () => {
    oldBin = oldFerryBin();
    admin = new pg.Pool({ connectionString: databaseUrl(), max: 2 });
    stream = await createTestStream({ prefix: 'skew' });
  });

  afterEach(stopAll);

  after(async () => {
    await stopAll();
    for (const s of schemas) {
      for (const name of [s, relayBossSchemaFor(s)]) await admin.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(name)} CASCADE`);
    }
    await admin?.end();
    await stream?.close();
  });

  test('version skew - an earlier relay started on a schema this release migrated is refused every lane and sends nothing; status and doctor flag it', async () => {
    const db: TestDatabase = await createTestDatabase({ prefix: 'skew_new', lanes: 4 });
    try {
      const ids = await publishEvents(db.pool, db.schema, stream.prefix, 40, { keys: 8, perTx: 10 });
      const old = startOld(db.schema);
      // Its heartbeat (no lanes held, so no lease row touched) goes through; every take is refused.
      await waitFor(async () => (await heartbeats(db.schema)).old.length === 1, { timeoutMs: 30_000, what: 'the earlier relay to beat' });
      await waitFor(() => old.output().includes('may not lease lane'), {
        timeoutMs: 15_000,
        what: 'the earlier relay to be refused a lease',
      });
      // Three terms: time to take, claim and send, were it allowed.
      await new Promise((resolve) => setTimeout(resolve, 3 * TERM_MS));
      assert.equal(await streamCount(), 0, 'the earlier relay sent nothing');
      assert.equal(await countPending(db.pool, db.schema), 40, 'every event still waits in the outbox');
      const { rows: owned } = await db.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${quoteIdentifier(db.schema)}.relay_leases WHERE owner IS NOT NULL`,
      );
      assert.equal(owned[0]?.n, 0, 'no lane was ever leased to it');
      assert.match(old.output(), new RegExp(`relay protocol unknown \\(older than 2\\).*admits relay protocol ${RELAY_PROTOCOL} or later`));

      const alone = await statusInstances(db.schema);
      assert.equal(alone.instances.length, 1);
      assert.deepEqual(
        alone.instances.map((i) => [i.release, i.belowFloor]),
        [[null, true]],
      );
      const check = await ferry(['status', '--database-url', databaseUrl(), '--schema', db.schema, '--check']);
      assert.equal(check.code, 1, 'status --check: an instance below the floor needs a person');
      assert.match(check.out, /release unknown \(older than release reporting\).*BELOW FLOOR/);
      assert.match(check.err, /1 relay instance below the schema's relay floor/);

      // This release's relay beside it takes every lane (the refused one is not counted in the fair share).
      startNew(db.schema);
      await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 60_000, what: 'the current relay to drain' });
      assertExactlyOnceInKeyOrder(await readStream(stream.nc, stream.name), ids);
      const mixed = await statusInstances(db.schema);
      assert.equal(mixed.instances.length, 2);
      const current = mixed.instances.find((i) => i.release !== null);
      assert.equal(current?.release, FERRY_RELEASE);
      assert.equal(current?.protocol, RELAY_PROTOCOL);
      assert.deepEqual(current?.lanes, [0, 1, 2, 3], 'the current relay holds all four lanes');
      assert.deepEqual(mixed.instances.find((i) => i.release === null)?.lanes, [], 'the earlier one holds none');
      assert.ok(mixed.mixedReleases?.includes(`release ${FERRY_RELEASE} (relay protocol ${RELAY_PROTOCOL})`), String(mixed.mixedReleases));
      assert.ok(mixed.mixedReleases?.includes('release unknown'), String(mixed.mixedReleases));
      const text = await ferry(['status', '--database-url', databaseUrl(), '--schema', db.schema]);
      assert.match(text.out, /warning: relay instances run different releases: /);

      const doctor = await ferry([
        'doctor',
        '--database-url',
        databaseUrl(),
        '--schema',
        db.schema,
        '--nats-url',
        natsUrl(),
        '--stream',
        stream.name,
        '--json',
      ]);
      assert.equal(doctor.code, 1, 'doctor: an instance below the floor is a problem');
      const relays = doctor
        .json<{ findings: Array<{ check: string; status: string; message: string; fix?: string }> }>()
        .findings.filter((f) => f.check === 'relays' && f.message.includes('alive'));
      assert.equal(relays.length, 1, JSON.stringify(relays));
      assert.equal(relays[0]?.status, 'problem');
      assert.match(
        relays[0]?.message ?? '',
        /2 relay instances alive; [0-9a-f]+ \(release unknown \(older than release reporting\)\) below the schema's relay floor/,
      );
      assert.match(relays[0]?.fix ?? '', /stop it/);

      // The console's overview says the same.
      const console_ = await startConsole({
        pool: db.pool,
        schema: db.schema,
        bossSchema: `${db.schema}_boss`,
        host: '127.0.0.1',
        port: 0,
        readOnly: true,
        token: 'skew-token-0123456789',
        refreshMs: 1000,
      });
      try {
        const page = await (
          await fetch(`${console_.url}/?fragment=1`, { headers: { authorization: 'Bearer skew-token-0123456789' } })
        ).text();
        assert.match(page, /release unknown \(older than release reporting\): below the relay floor, stop it/);
        assert.match(page, new RegExp(`release ${FERRY_RELEASE.replaceAll('.', '\\.')} \\(relay protocol ${RELAY_PROTOCOL}\\)`));
        assert.match(page, /Relays run different releases: /);
      } finally {
        await console_.close();
      }
    } finally {
      await stopAll();
      await db.close();
    }
  });

  test('version skew - this release migrating under a running earlier relay commits only once that relay has stopped sending, and it sends nothing after', async () => {
    const schema = uniqueName('skew_roll');
    schemas.push(schema);
    const own = await createTestStream({ prefix: 'skewroll' });
    // The schema as the earlier release left it: its own ferry migrate.
    const migrated = spawnSync(process.execPath, [oldBin, 'migrate', '--database-url', databaseUrl(), '--schema', schema, '--lanes', '4'], {
      encoding: 'utf8',
    });
    assert.equal(migrated.status, 0, migrated.stderr);
    const pool = new pg.Pool({ connectionString: databaseUrl(), max: 4 });
    const count = async () => (await own.jsm.streams.info(own.name)).state.messages;
    let load: ReturnType<typeof steadyLoad> | undefined;
    try {
      const old = startOld(schema);
      const first = await publishEvents(pool, schema, own.prefix, 20, { keys: 5, perTx: 5, keyPrefix: 'r' });
      // Before outbox migration 000015 a row's delivery state is on the row.
      const pendingAt12 = async () =>
        (await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${quoteIdentifier(schema)}.outbox WHERE published_at IS NULL`))
          .rows[0]?.n;
      await waitFor(async () => (await pendingAt12()) === 0, {
        timeoutMs: 60_000,
        what: 'the earlier relay to work before the upgrade',
      });

      // The rolling-update window: events keep coming, the earlier relay holds every lane and ships them,
      // and this release migrates.
      load = steadyLoad(pool, schema, own.prefix, 100);
      await new Promise((resolve) => setTimeout(resolve, TERM_MS));
      const sentBefore = await count();
      assert.ok(sentBefore > 20, 'the earlier relay was shipping the load when the migration began');
      const started = performance.now();
      const result = await migrate({ pool, schema });
      const migrateMs = performance.now() - started;
      const atCommit = await count();
      assert.deepEqual(
        result.applied.map((m) => m.version),
        [13, 14, 15, ...AFTER_15],
        'the relay floor (and the failed rows index and the pending table after it) are new to a schema at 12',
      );
      // It waited for the earlier relay's leases to run out: at most one term (and a statement's slack).
      assert.ok(migrateMs <= TERM_MS + 1_500, `the migration took ${Math.round(migrateMs)} ms with a ${TERM_MS} ms term`);
      await new Promise((resolve) => setTimeout(resolve, 3 * TERM_MS));
      const ids = await load.stop();
      assert.equal(await count(), atCommit, 'not one message from the earlier relay once the new schema was in place');
      const { rows: held } = await pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${quoteIdentifier(schema)}.relay_leases WHERE owner IS NOT NULL AND expires_at > now()`,
      );
      assert.equal(held[0]?.n, 0, 'it holds no lease: every take since was refused');
      assert.equal(old.proc.exitCode, null, 'it still runs (an old release does not know to stop), idle');
      assert.ok((await countPending(pool, schema)) > 0, 'the events published since wait in the outbox');

      startNew(schema);
      await waitFor(async () => (await countPending(pool, schema)) === 0, { timeoutMs: 60_000, what: 'the current relay to drain' });
      assertExactlyOnceInKeyOrder(await readStream(own.nc, own.name), [...first, ...ids]);
    } finally {
      await load?.stop().catch(() => {}); // stopped already unless an assertion failed first
      await stopAll();
      await pool.end();
      await own.close();
    }
  });
});

describe('relay floor: this release refuses a schema that does not admit it', () => {
  let db: TestDatabase;

  before(async () => {
    db = await createTestDatabase({ prefix: 'skew_floor', lanes: 2 });
  });

  after(async () => {
    await db?.close();
  });

  function relay() {
    return createRelay({ databaseUrl: db.url, schema: db.schema, nats: { servers: natsUrl() }, maintenance: false });
  }

  test("release - the CLI, the relay, the inbox and the publisher name one release: the packages' version", async () => {
    const version = (JSON.parse(readFileSync(join(REPO, 'packages/core/package.json'), 'utf8')) as { version: string }).version;
    assert.equal(FERRY_RELEASE, version);
    assert.equal(INBOX_RELEASE, version);
    assert.equal(PUBLISHER_RELEASE, version);
    const r = await ferry(['--version']);
    assert.equal(r.code, 0);
    assert.equal(r.out, `${version} (relay protocol ${RELAY_PROTOCOL})`);
  });

  test('relay floor - a relay refuses to start on a schema whose floor is above its protocol, naming both and the fix', async () => {
    await db.pool.query(`UPDATE ${quoteIdentifier(db.schema)}.settings SET value = '99' WHERE name = 'relay_protocol_floor'`);
    try {
      await assert.rejects(relay().start(), (err: Error) => {
        assert.equal(err.name, 'MigrationError');
        assert.match(
          err.message,
          new RegExp(
            `admits relay protocol 99 or later.*release ${FERRY_RELEASE}, relay protocol ${RELAY_PROTOCOL}: run the Ferry release that migrated the schema`,
          ),
        );
        return true;
      });
      const cli = await ferry([
        'relay',
        '--database-url',
        db.url,
        '--schema',
        db.schema,
        '--nats-url',
        natsUrl(),
        '--no-maintenance',
        '--http-port',
        '0',
      ]);
      assert.equal(cli.code, 3, `exit 3 as for a newer schema: ${cli.err}`);
      assert.match(cli.err, /admits relay protocol 99 or later/);
    } finally {
      await db.pool.query(`UPDATE ${quoteIdentifier(db.schema)}.settings SET value = $1 WHERE name = 'relay_protocol_floor'`, [
        String(RELAY_PROTOCOL),
      ]);
    }
  });

  test('relay floor - a relay refuses a schema whose floor is below its own schema floor (not migrated to 000015): run ferry migrate first', async () => {
    await db.pool.query(`UPDATE ${quoteIdentifier(db.schema)}.settings SET value = '2' WHERE name = 'relay_protocol_floor'`);
    try {
      await assert.rejects(relay().start(), (err: Error) => {
        assert.equal(err.name, 'NotMigratedError');
        assert.match(
          err.message,
          new RegExp(
            `admits relay protocol 2 or later .*migrated by an earlier Ferry.*run ferry migrate --schema ${db.schema} with this release first`,
          ),
        );
        return true;
      });
      const { rows } = await db.pool.query(
        `SELECT count(*)::int AS n FROM ${quoteIdentifier(db.schema)}.relay_leases WHERE owner IS NOT NULL`,
      );
      assert.equal(rows[0].n, 0, 'it took no lane');
    } finally {
      await db.pool.query(`UPDATE ${quoteIdentifier(db.schema)}.settings SET value = $1 WHERE name = 'relay_protocol_floor'`, [
        String(RELAY_PROTOCOL),
      ]);
    }
  });

  test('relay floor - a relay refuses a schema without a floor (migrated by an earlier release): run ferry migrate first', async () => {
    await db.pool.query(`DELETE FROM ${quoteIdentifier(db.schema)}.settings WHERE name = 'relay_protocol_floor'`);
    try {
      await assert.rejects(relay().start(), (err: Error) => {
        assert.equal(err.name, 'NotMigratedError');
        assert.match(err.message, new RegExp(`has no relay floor .*run ferry migrate --schema ${db.schema} with this release`));
        return true;
      });
    } finally {
      await db.pool.query(`INSERT INTO ${quoteIdentifier(db.schema)}.settings (name, value) VALUES ('relay_protocol_floor', $1)`, [
        String(RELAY_PROTOCOL),
      ]);
    }
  });

  test('relay floor - migrating to it is refused while a relay from before leases holds lanes by advisory lock, and nothing is migrated', async () => {
    const schema = uniqueName('skew_legacy');
    const s = quoteIdentifier(schema);
    await migrate({ pool: db.pool, schema, lanes: 2 });
    const holder = await db.pool.connect();
    try {
      // The schema at 12, as the release before the floor left it.
      await undoPendingTable(db.pool, schema);
      await db.pool.query(`DROP TRIGGER relay_lease_floor ON ${s}.relay_leases; DROP FUNCTION ${s}.relay_lease_floor()`);
      await db.pool.query(`ALTER TABLE ${s}.relay_instances DROP COLUMN release, DROP COLUMN protocol`);
      await db.pool.query(`DELETE FROM ${s}.settings WHERE name = 'relay_protocol_floor'`);
      await db.pool.query(`DELETE FROM ${s}.migrations WHERE migration_set = 'outbox' AND version >= 13`);
      // A relay from before leases held lane 1 with this session lock (lane-leaser.ts before outbox migration 000010).
      await holder.query('SELECT pg_advisory_lock($1::int, 1)', [lockNamespace(`ferry:lanes:${schema}`)]);
      const { rows: me } = await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      await assert.rejects(migrate({ pool: db.pool, schema }), (err: Error) => {
        assert.equal(err.name, 'MigrationError');
        assert.match(
          err.message,
          new RegExp(
            `relays of a release from before lane leases hold lanes of schema "${schema}" by advisory lock \\(backend pid ${me[0]?.pid} `,
          ),
        );
        assert.match(err.message, /nothing was migrated; stop every ferry relay of that release, then run ferry migrate again/);
        return true;
      });
      assert.equal((await migrationStatus(db.pool, { schema })).current, 12, 'the schema is as it was');
      await holder.query('SELECT pg_advisory_unlock_all()');
      const r = await migrate({ pool: db.pool, schema });
      assert.deepEqual(
        r.applied.map((m) => m.version),
        [13, 14, 15, ...AFTER_15],
        'once that relay is gone, the migrations run',
      );
    } finally {
      holder.release();
      await db.pool.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`);
    }
  });

  test('relays before leases - one started beside this release finds every lane locked; one holding lanes shows in status and doctor', async () => {
    const ns = lockNamespace(`ferry:lanes:${db.schema}`);
    // The statement a relay from before leases took its lanes with (apps/relay/src/sql/lanes.ts before outbox
    // migration 000010): session advisory locks (namespace, lane), at most $5, none of those held ($3).
    const tryLanes = `SELECT lane FROM (
      SELECT ((s + $4::int) % $2::int) AS lane FROM generate_series(0, $2::int - 1) AS s
    ) c
     WHERE CASE WHEN lane = ANY ($3::int[]) THEN false ELSE pg_try_advisory_lock($1::int, lane) END
     LIMIT $5`;
    const locked = async () => {
      const { rows } = await db.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid = $1::int::oid`,
        [ns],
      );
      return rows[0]?.n ?? 0;
    };
    const current = relay();
    const old = await db.pool.connect();
    try {
      await current.start();
      await waitFor(async () => (await locked()) === 2, { timeoutMs: 15_000, what: "this release's relay to lock both lanes the old way" });
      const beside = await old.query<{ lane: number }>(tryLanes, [ns, 2, [], 0, 2]);
      assert.deepEqual(beside.rows, [], 'a relay from before leases started beside it gets no lane');
      const none = await ferry(['status', '--database-url', db.url, '--schema', db.schema, '--json']);
      assert.deepEqual(none.json<{ relaysBeforeLeases: unknown[] }>().relaysBeforeLeases, [], "this release's own locks are not reported");
      await current.stop();
      const alone = await old.query<{ lane: number }>(tryLanes, [ns, 2, [], 0, 2]);
      assert.equal(alone.rows.length, 2, 'with no relay of this release running, it takes both (nothing else could stop it)');
      const { rows: me } = await old.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      const status = await ferry(['status', '--database-url', db.url, '--schema', db.schema, '--json']);
      assert.deepEqual(
        status.json<{ relaysBeforeLeases: Array<{ pid: number; lanes: number[] }> }>().relaysBeforeLeases.map((r) => [r.pid, r.lanes]),
        [[me[0]?.pid, [0, 1]]],
      );
      const check = await ferry(['status', '--database-url', db.url, '--schema', db.schema, '--check']);
      assert.equal(check.code, 1);
      assert.match(check.out, /warning: a relay from before lane leases holds lanes by advisory lock: backend pid \d+ .*lanes 0,1/);
      const doctor = await ferry(['doctor', '--database-url', db.url, '--schema', db.schema, '--nats-url', natsUrl(), '--json']);
      assert.equal(doctor.code, 1);
      const found = doctor.json<{ findings: Array<{ check: string; status: string; message: string }> }>().findings;
      assert.ok(
        found.some(
          (f) => f.check === 'relays' && f.status === 'problem' && f.message.startsWith('a relay from before lane leases holds lanes'),
        ),
        JSON.stringify(found),
      );
    } finally {
      await old.query('SELECT pg_advisory_unlock_all()').catch(() => {});
      old.release();
      await current.stop();
    }
  });

  test('relay floor - the database refuses a lease to an instance below the floor, whoever asks', async () => {
    const s = quoteIdentifier(db.schema);
    await db.pool.query(
      `INSERT INTO ${s}.relay_instances (instance, application_name, backend_pid, seen_at, expires_at) VALUES ('0ld0ld00', 'x', 1, now(), now() + interval '1 minute')`,
    );
    await assert.rejects(
      db.pool.query(
        `UPDATE ${s}.relay_leases SET owner = '0ld0ld00', epoch = epoch + 1, expires_at = now() + interval '10 seconds' WHERE lane = 0`,
      ),
      (err: Error & { code?: string }) => {
        assert.equal(err.code, 'FR001');
        assert.match(
          err.message,
          /relay instance 0ld0ld00 \(release unknown, relay protocol unknown \(older than 2\)\) may not lease lane 0/,
        );
        return true;
      },
    );
    await db.pool.query(`UPDATE ${s}.relay_instances SET release = $1, protocol = $2 WHERE instance = '0ld0ld00'`, [
      FERRY_RELEASE,
      RELAY_PROTOCOL,
    ]);
    const taken = await db.pool.query(`UPDATE ${s}.relay_leases SET owner = '0ld0ld00', epoch = epoch + 1 WHERE lane = 0`);
    assert.equal(taken.rowCount, 1, 'an instance at the floor is leased the lane');
    await db.pool.query(`UPDATE ${s}.relay_leases SET owner = NULL WHERE lane = 0`);
    await db.pool.query(`DELETE FROM ${s}.relay_instances WHERE instance = '0ld0ld00'`);
  });
});
