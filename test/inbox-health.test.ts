// Issue 43 item 6: parked inbox events and running inboxes were invisible to `ferry status`,
// `status --check` and `ferry doctor` (doctor said ok), so a probe on `status --check` never paged.
// Now status and doctor count, per consumer, parked events, failed ones and sequential keys waiting
// on a version nothing holds; --check exits 1 on them above --max-parked, --max-failed-parked and
// --max-waiting-keys; and every inbox heartbeats into inbox_instances, listed with its release.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { FERRY_RELEASE } from '@ferry/core';
import { compileInboxOptions, type InboxHealth, type InboxOptions, isValidationError } from '@ferry/inbox';
import { waitFor } from '@ferry/testkit';
import { EFFECT_SQL, ferryEvent, type InboxFixture, inboxFixture, publishEvents } from './inbox-support.js';
import { ferry } from './ops-helpers.js';

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
});
