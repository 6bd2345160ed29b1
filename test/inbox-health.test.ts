// Issue 43 item 6: parked inbox events and running inboxes were invisible to `ferry status`,
// `status --check` and `ferry doctor` (doctor said ok), so a probe on `status --check` never paged.
// Now status and doctor count, per consumer, parked events, failed ones and sequential keys waiting
// on a version nothing holds; --check exits 1 on them above --max-parked, --max-failed-parked and
// --max-waiting-keys; and every inbox heartbeats into inbox_instances, listed with its release.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { FERRY_RELEASE, quoteIdentifier } from '@ferry/core';
import { compileInboxOptions, type InboxHealth, type InboxOptions, isValidationError } from '@ferry/inbox';
import { createTestDatabase, uniqueName, waitFor } from '@ferry/testkit';
import pg from 'pg';
import { EFFECT_SQL, ferryEvent, type InboxFixture, inboxFixture, publishEvents } from './inbox-support.js';
import { ferry } from './ops-helpers.js';
import { outcome, roleUrl } from './role-helpers.js';

let f: InboxFixture | undefined;
after(async () => {
  await f?.close();
});

interface Status {
  inboxOnly: boolean;
  inbox: InboxHealth | null;
}

describe('inbox health in ferry status and ferry doctor', () => {
  test('ferry status - counts parked, failed parked and keys waiting on a missing version per consumer; --check pages above the limits; doctor is not ok', async () => {
    const fx = await inboxFixture();
    f = fx;
    const where = ['--database-url', fx.db.url, '--schema', fx.db.schema, '--boss-schema', fx.bossSchema];
    const inbox = fx.inbox({
      mode: 'sequential',
      gapTimeoutMs: 500,
      gapRetryMs: 50,
      maxDeliver: 1,
      parkRetryLimit: 0,
      heartbeatIntervalMs: 1_000,
      handlers: {
        Set: async (event, { tx }) => {
          if (event.key === 'poison') throw new Error('poison is broken for good');
          await tx.query(EFFECT_SQL(fx.s).effect, [event.key, event.version.toString()]);
        },
      },
    });
    await inbox.start();
    const p = fx.stream.prefix;
    // k: v2 never arrives, so v3 and v4 park after the gap timeout and v3's retry fails (it waits for 2);
    // poison/1 fails in its handler and parks, and its retry fails too. v4 waits behind v3.
    await publishEvents(fx.stream.nc, [
      ferryEvent(p, { key: 'k', version: 1 }),
      ferryEvent(p, { key: 'k', version: 3 }),
      ferryEvent(p, { key: 'k', version: 4 }),
      ferryEvent(p, { key: 'poison', version: 1 }),
      ferryEvent(p, { key: 'fine', version: 1 }),
    ]);
    const billing = async () =>
      (await ferry(['status', ...where, '--json'])).json<Status>().inbox?.consumers.find((c) => c.consumer === 'billing');
    const counted = await waitFor(
      async () => {
        const c = await billing();
        return c && c.failedParked === 2 && c.parked === 3 ? c : undefined;
      },
      { timeoutMs: 60_000, what: 'v3 and poison/1 parked and failed, v4 parked behind v3' },
    );
    assert.deepEqual(counted, { consumer: 'billing', parked: 3, failedParked: 2, keysWaitingOnMissingVersion: 1 });
    assert.deepEqual(await fx.effects(), [
      { key: 'fine', version: '1' },
      { key: 'k', version: '1' },
    ]);

    const text = await ferry(['status', ...where]);
    assert.equal(text.code, 0);
    assert.match(text.out, /schema \S+: inbox tables only \(no outbox\)/);
    assert.match(
      text.out,
      /warning: consumer billing: 3 parked events, 2 failed, 1 key waits on a version nothing holds: ferry inbox parked list --consumer billing/,
    );

    const check = await ferry(['status', ...where, '--check']);
    assert.equal(check.code, 1, check.err);
    assert.match(check.err, /consumer billing: 2 failed parked events, above --max-failed-parked 0/);
    assert.match(check.err, /consumer billing: 1 key waits on a version nothing holds, above --max-waiting-keys 0/);
    assert.match(check.err, /consumer billing: 3 parked events, above --max-parked 0 \(ferry inbox parked list --consumer billing\)/);
    const tolerated = await ferry([
      'status',
      ...where,
      '--check',
      '--max-parked',
      '3',
      '--max-failed-parked',
      '2',
      '--max-waiting-keys',
      '1',
    ]);
    assert.equal(tolerated.code, 0, tolerated.err);
    const parkedOnly = await ferry(['status', ...where, '--check', '--max-failed-parked', '2', '--max-waiting-keys', '1']);
    assert.equal(parkedOnly.code, 1);
    assert.match(parkedOnly.err, /needs a person: consumer billing: 3 parked events, above --max-parked 0 \(/);
    const bad = await ferry(['status', ...where, '--max-parked', '-1']);
    assert.equal(bad.code, 2);
    assert.match(bad.err, /--max-parked/);

    const doctor = await ferry(['doctor', ...where, '--nats-url', fx.stream.nc.getServer(), '--consumer', 'billing', '--json']);
    const parked = doctor
      .json<{ findings: Array<{ check: string; status: string; message: string; fix?: string }> }>()
      .findings.filter((x) => x.check === 'parked');
    assert.deepEqual(
      parked.map((x) => x.status),
      ['problem'],
      JSON.stringify(parked),
    );
    assert.match(parked[0]?.message ?? '', /consumer billing: 3 parked events, 2 failed, 1 key waits on a version nothing holds/);
    assert.match(parked[0]?.fix ?? '', /ferry inbox parked list --schema \S+ --consumer billing/);
    assert.equal(doctor.code, 1);
  });

  test('ferry status - lists each running inbox with its consumer, release and last heartbeat; a clean stop removes it, a dead one shows stale', async () => {
    const fx = f ?? (await inboxFixture());
    f = fx;
    const where = ['--database-url', fx.db.url, '--schema', fx.db.schema, '--boss-schema', fx.bossSchema];
    const inbox = fx.inbox({ consumer: 'shipping', heartbeatIntervalMs: 1_000, handlers: { Set: async () => {} } });
    await inbox.start();
    const mine = async () =>
      (await ferry(['status', ...where, '--json'])).json<Status>().inbox?.instances.find((i) => i.consumer === 'shipping');
    const first = await waitFor(mine, { what: 'the inbox heartbeat in ferry status' });
    assert.equal(first.release, FERRY_RELEASE);
    assert.equal(first.mode, 'latest');
    assert.equal(first.stream, fx.stream.name);
    assert.equal(first.pid, process.pid);
    assert.equal(first.stale, false);
    // Renewed on its timer: a later heartbeat than the first one seen.
    await waitFor(async () => (await mine())?.lastHeartbeatAt !== first.lastHeartbeatAt, {
      timeoutMs: 20_000,
      what: 'a renewed heartbeat',
    });
    const text = await ferry(['status', ...where]);
    assert.match(
      text.out,
      new RegExp(
        `  ${first.instance}  consumer shipping  release ${FERRY_RELEASE.replaceAll('.', '\\.')}  latest on stream ${fx.stream.name}  pid ${process.pid} on \\S+  last heartbeat [\\d.]+ (ms|s) ago\\n`,
      ),
    );

    // An inbox that was killed stops renewing: its row outlives it and shows stale.
    await fx.db.pool.query(
      `INSERT INTO ${fx.s}.inbox_instances (instance, consumer, stream, mode, release, seen_at, expires_at)
       VALUES ('0dead0ff', 'shipping', 'S', 'latest', '0.0.1', now() - interval '1 minute', now() - interval '30 seconds')`,
    );
    const withStale = await ferry(['status', ...where]);
    assert.match(withStale.out, /inbox instances alive: \d+ \(and 1 stale\)/);
    assert.match(withStale.out, /0dead0ff {2}consumer shipping {2}release 0\.0\.1 .* last heartbeat 6\d\.\d s ago {2}STALE/);

    await inbox.stop();
    const after = (await ferry(['status', ...where, '--json'])).json<Status>().inbox?.instances ?? [];
    assert.deepEqual(
      after.filter((i) => i.consumer === 'shipping').map((i) => [i.instance, i.stale]),
      [['0dead0ff', true]],
      'the stopped inbox is gone; only the dead one is left',
    );
  });

  test('inbox options - heartbeatIntervalMs is bounded, 10 s by default', () => {
    const base = {
      pool: { query: async () => ({ rows: [] }), connect: async () => ({}) },
      nc: { request: async () => ({}) },
      stream: 'ORDERS',
      consumer: 'billing',
      handlers: {},
    } as unknown as InboxOptions;
    assert.equal(compileInboxOptions(base).heartbeatIntervalMs, 10_000);
    for (const bad of [999, 600_001, 1.5, '5000']) {
      assert.throws(
        () => compileInboxOptions({ ...base, heartbeatIntervalMs: bad as number }),
        (err: Error) => isValidationError(err) && /heartbeatIntervalMs must be an integer from 1000 to 600000/.test(err.message),
      );
    }
  });

  test('inbox migration 8 - a role granted the consumer tables before it beats as its own consumer after the upgrade, and only as it', async () => {
    const db = await createTestDatabase({ prefix: 'inbox_beat_grants', migrate: ['inbox'] });
    const role = uniqueName('fi');
    const r = quoteIdentifier(role);
    const s = quoteIdentifier(db.schema);
    const rolePool = new pg.Pool({ connectionString: roleUrl(db.url, role), max: 1 });
    try {
      // The schema as the release before 000008 left it, with a role confined by that release's --print-grants.
      await db.pool.query(`DROP TABLE ${s}.inbox_instances`);
      await db.pool.query(`DELETE FROM ${s}.migrations WHERE migration_set = 'inbox' AND version = 8`);
      await db.pool.query(`CREATE ROLE ${r} LOGIN`);
      await db.pool.query(`GRANT USAGE ON SCHEMA ${s} TO ${r}`);
      for (const t of ['inbox_versions', 'inbox_messages', 'inbox_early']) {
        await db.pool.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON ${s}.${t} TO ${r}`);
        await db.pool.query(
          `CREATE POLICY "ferry_role_${role}" ON ${s}.${t} FOR ALL TO ${r} USING (consumer IN ('billing')) WITH CHECK (consumer IN ('billing'))`,
        );
      }
      const migrated = await ferry(['migrate', '--inbox', '--database-url', db.url, '--schema', db.schema]);
      assert.equal(migrated.code, 0, migrated.err);
      await db.pool.query(
        `INSERT INTO ${s}.inbox_instances (instance, consumer, stream, mode, release, expires_at) VALUES ('0ther000', 'other', 'S', 'latest', 'x', now() + interval '1 minute')`,
      );
      const beat = (instance: string, consumer: string) =>
        outcome(
          rolePool,
          `INSERT INTO ${s}.inbox_instances (instance, consumer, stream, mode, release, expires_at) VALUES ($1, $2, 'S', 'latest', 'x', now() + interval '1 minute')`,
          [instance, consumer],
        );
      assert.equal(await beat('b111111a', 'billing'), 'ok (1 rows)', 'its own consumer: granted and allowed by the copied policy');
      assert.equal(await beat('b222222b', 'other'), '42501', "another consumer's heartbeat: refused by the policy");
      const seen = await rolePool.query<{ consumer: string }>(`SELECT consumer FROM ${s}.inbox_instances ORDER BY consumer`);
      assert.deepEqual(
        seen.rows.map((x) => x.consumer),
        ['billing'],
        "it sees its own consumer's heartbeats only",
      );
    } finally {
      await rolePool.end();
      await db.pool.query(`DROP OWNED BY ${r}`).catch(() => {});
      await db.pool.query(`DROP ROLE IF EXISTS ${r}`);
      await db.close();
    }
  });
});
