// `sequential` mode: a second copy of a version already stored early (a
// redelivery, or the producer's retry with another message id) is a
// duplicate. It was acked and reported as `gap` and never as anything else, so
// a consumer's counts ended one message short: the two-instance race waited
// for the last settle until its 120 s bound.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import type { Inbox } from '@ferry/inbox';
import { waitFor } from '@ferry/testkit';
import { countReports, EFFECT_SQL, ferryEvent, type InboxFixture, inboxFixture, publishEvents } from './inbox-support.js';

const fixtures: InboxFixture[] = [];
after(async () => {
  for (const f of fixtures) await f.close();
});

/** A started `sequential` inbox recording each applied effect; one message at a time, so a copy reaches the gate after its original is stored. */
async function sequentialInbox(): Promise<{ f: InboxFixture; inbox: Inbox }> {
  const f = await inboxFixture();
  fixtures.push(f);
  const inbox = f.inbox({
    mode: 'sequential',
    concurrency: 1,
    handlers: {
      Set: async (event, { tx }) => {
        await tx.query(EFFECT_SQL(f.s).effect, [event.key, event.version.toString()]);
      },
    },
  });
  await inbox.start();
  return { f, inbox };
}

test('inbox - sequential: a second copy of a stored early version settles as a duplicate, and the version is applied once', async () => {
  const { f, inbox } = await sequentialInbox();
  const v2 = ferryEvent(f.stream.prefix, { key: 'a', version: 2 });
  await publishEvents(f.stream.nc, [v2]);
  await publishEvents(f.stream.nc, [v2], { msgIdSuffix: 'resend' });
  await waitFor(() => inbox.counts().gap + inbox.counts().duplicate >= 2, { what: 'both copies of version 2 handled', timeoutMs: 15_000 });
  assert.equal((await f.db.pool.query(`SELECT count(*)::int AS n FROM ${f.s}.inbox_early`)).rows[0].n, 1, 'version 2 stored once');
  assert.equal(inbox.counts().gap, 1, 'the first copy waits for its gap');
  assert.equal(inbox.counts().duplicate, 1, 'the second copy is a duplicate');
  assert.equal(countReports(f.reports, 'duplicate'), 1, 'onEvent heard of the duplicate');

  await publishEvents(f.stream.nc, [ferryEvent(f.stream.prefix, { key: 'a', version: 1 })]);
  await waitFor(() => inbox.counts().applied === 2, { what: 'versions 1 and 2 applied', timeoutMs: 15_000 });
  const c = inbox.counts();
  assert.equal(c.applied + c.stale + c.duplicate, 3, `each of the three messages settled once: ${JSON.stringify(c)}`);
  assert.deepEqual(
    (await f.effects()).map((e) => e.version),
    ['1', '2'],
    'applied once each, in order',
  );
  const info = await f.stream.jsm.consumers.info(f.stream.name, 'billing');
  assert.equal(info.num_ack_pending, 0, 'every message acked');
  await inbox.stop();
});

test('inbox - sequential: copies of an early version past 9 (10 sorts before 3 as text) are duplicates, and versions 1-10 apply in number order', async () => {
  const { f, inbox } = await sequentialInbox();
  const v10 = ferryEvent(f.stream.prefix, { key: 'b', version: 10 });
  await publishEvents(f.stream.nc, [v10]);
  await publishEvents(f.stream.nc, [v10], { msgIdSuffix: 'resend' });
  await publishEvents(f.stream.nc, [v10], { msgIdSuffix: 'again' });
  await waitFor(() => inbox.counts().gap + inbox.counts().duplicate >= 3, {
    what: 'three copies of version 10 handled',
    timeoutMs: 15_000,
  });
  assert.equal(inbox.counts().gap, 1);
  assert.equal(inbox.counts().duplicate, 2);
  await publishEvents(
    f.stream.nc,
    Array.from({ length: 9 }, (_, i) => ferryEvent(f.stream.prefix, { key: 'b', version: i + 1 })),
  );
  await waitFor(() => inbox.counts().applied === 10, { what: 'versions 1-10 applied', timeoutMs: 15_000 });
  assert.deepEqual(
    (await f.effects()).map((e) => e.version),
    ['1', '2', '3', '4', '5', '6', '7', '8', '9', '10'],
  );
  const applied = await f.db.pool.query<{ v: string }>(`SELECT version::text AS v FROM ${f.s}.effects ORDER BY applied_at, version`);
  assert.deepEqual(
    applied.rows.map((r) => r.v),
    ['1', '2', '3', '4', '5', '6', '7', '8', '9', '10'],
    'applied in number order',
  );
  const c = inbox.counts();
  assert.equal(c.applied + c.stale + c.duplicate, 12, `each of the twelve messages settled once: ${JSON.stringify(c)}`);
  await inbox.stop();
});
