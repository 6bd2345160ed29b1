import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { listParked } from '@ferry/inbox';
import { main } from '@ferry/relay';
import { waitFor } from '@ferry/testkit';
import { PgBoss } from 'pg-boss';
import { EFFECT_SQL, ferryEvent, type InboxFixture, inboxFixture, publishEvents } from './inbox-support.js';

// Issue 14 item 12: in sequential mode, discarding a parked v3 that waited for v2 recorded 3,
// so v2, arriving later, was dropped as stale and never applied.

let f: InboxFixture | undefined;
let boss: PgBoss | undefined;
after(async () => {
  await boss?.stop({ graceful: false }).catch(() => {});
  await f?.close();
});

async function ferry(fx: InboxFixture, args: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(
    ['node', 'ferry', ...args, '--database-url', fx.db.url, '--schema', fx.db.schema, '--boss-schema', fx.bossSchema],
    { out: (l) => out.push(l), err: (l) => err.push(l), env: {} },
  );
  return { code, out: out.join('\n'), err: err.join('\n') };
}

describe('ferry inbox parked discard', () => {
  test('ferry inbox parked discard - discarding v3 that waits for v2 skips v3 only: v2 applies when it comes, then v4', async () => {
    const fx = await inboxFixture();
    f = fx;
    const inbox = fx.inbox({
      mode: 'sequential',
      gapTimeoutMs: 200,
      gapRetryMs: 50,
      parkRetryLimit: 0,
      handlers: {
        Set: async (event, { tx }) => {
          await tx.query(EFFECT_SQL(fx.s).effect, [event.key, event.version.toString()]);
        },
      },
    });
    await inbox.start();
    const p = fx.stream.prefix;
    await publishEvents(fx.stream.nc, [ferryEvent(p, { key: 'a', version: 1 }), ferryEvent(p, { key: 'a', version: 3 })]);
    boss = new PgBoss({ connectionString: fx.db.url, schema: fx.bossSchema, supervise: false, schedule: false, max: 2 });
    boss.on('error', () => {});
    await boss.start();
    const b = boss;
    const parked = await waitFor(
      async () =>
        (await listParked({ boss: b, consumer: 'billing' })).find((r) => r.key === 'a' && r.version === '3' && r.state === 'failed'),
      { what: 'a/3 parked for the gap and failed in the park', timeoutMs: 20_000 },
    );
    // Without a terminal it needs --yes; --dry-run lists what it would discard. Neither changes anything.
    const unconfirmed = await ferry(fx, ['inbox', 'parked', 'discard', parked.jobId, '--consumer', 'billing']);
    assert.equal(unconfirmed.code, 2, unconfirmed.err);
    assert.match(unconfirmed.err, /pass --yes to confirm/);
    const dry = await ferry(fx, ['inbox', 'parked', 'discard', parked.jobId, '--consumer', 'billing', '--dry-run', '--json']);
    assert.equal(dry.code, 0, dry.err);
    assert.deepEqual(
      (JSON.parse(dry.out) as { wouldDiscard: Array<{ jobId: string }> }).wouldDiscard.map((p) => p.jobId),
      [parked.jobId],
    );
    assert.equal((await listParked({ boss: b, consumer: 'billing' })).length, 1, 'still parked');
    const discarded = await ferry(fx, ['inbox', 'parked', 'discard', parked.jobId, '--consumer', 'billing', '--yes']);
    assert.equal(discarded.code, 0, discarded.err);
    assert.match(discarded.out, /discarded 1 of 1/);
    const row = async () =>
      (
        await fx.db.pool.query<{ version: string; parked: number; skipped: string[] }>(
          `SELECT version::text, parked, skipped::text[] AS skipped FROM ${fx.s}.inbox_versions WHERE consumer = 'billing' AND key = 'a'`,
        )
      ).rows[0];
    assert.deepEqual(await row(), { version: '1', parked: 0, skipped: ['3'] }, 'v2 is still awaited');
    // v2 arrives late: applied, and the recorded version moves over the discarded v3.
    await publishEvents(fx.stream.nc, [ferryEvent(p, { key: 'a', version: 2 })]);
    await waitFor(async () => (await fx.effects()).some((e) => e.key === 'a' && e.version === '2'), {
      what: 'a/2 applied',
      timeoutMs: 15_000,
    });
    await waitFor(async () => (await row())?.version === '3', { what: 'recorded version 3 after v2', timeoutMs: 5000 });
    assert.deepEqual(await row(), { version: '3', parked: 0, skipped: [] });
    await publishEvents(fx.stream.nc, [ferryEvent(p, { key: 'a', version: 4 })]);
    await waitFor(async () => (await fx.effects()).some((e) => e.key === 'a' && e.version === '4'), {
      what: 'a/4 applied',
      timeoutMs: 15_000,
    });
    assert.deepEqual(await fx.effects(), [
      { key: 'a', version: '1' },
      { key: 'a', version: '2' },
      { key: 'a', version: '4' },
    ]);
    // Discarding it again finds nothing: the parked count is not taken off twice.
    const again = await ferry(fx, ['inbox', 'parked', 'discard', parked.jobId, '--consumer', 'billing', '--yes']);
    assert.equal(again.code, 2);
    assert.equal((await row())?.parked, 0);
  });
});
