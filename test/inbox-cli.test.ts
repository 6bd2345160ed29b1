import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { listParked, type ParkedEvent } from '@ferry/inbox';
import { main } from '@ferry/relay';
import { waitFor } from '@ferry/testkit';
import { PgBoss } from 'pg-boss';
import { EFFECT_SQL, ferryEvent, type InboxFixture, inboxFixture, publishEvents } from './inbox-support.js';

let f: InboxFixture | undefined;
let boss: PgBoss | undefined;
after(async () => {
  await boss?.stop({ graceful: false }).catch(() => {});
  await f?.close();
});

/** Runs `ferry …` in this process (the inbox under test keeps running beside it). */
async function ferry(fx: InboxFixture, args: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(
    ['node', 'ferry', ...args, '--database-url', fx.db.url, '--schema', fx.db.schema, '--boss-schema', fx.bossSchema],
    {
      out: (l) => out.push(l),
      err: (l) => err.push(l),
      env: {},
    },
  );
  return { code, out: out.join('\n'), err: err.join('\n') };
}

describe('ferry inbox parked', () => {
  test('ferry inbox parked - lists parked events, discard skips a sequential version so its key moves on, retry re-runs a failed one', async () => {
    const fx = await inboxFixture();
    f = fx;
    let failB = true;
    const inbox = fx.inbox({
      mode: 'sequential',
      maxDeliver: 1,
      parkRetryLimit: 0,
      handlers: {
        Set: async (event, { tx }) => {
          if (event.key === 'a' && event.version === 1n) throw new Error('a/1 is broken for good');
          if (event.key === 'b' && failB) throw new Error('b is down');
          await tx.query(EFFECT_SQL(fx.s).effect, [event.key, event.version.toString()]);
        },
      },
    });
    await inbox.start();
    const p = fx.stream.prefix;
    await publishEvents(fx.stream.nc, [
      ferryEvent(p, { key: 'a', version: 1 }),
      ferryEvent(p, { key: 'a', version: 2 }),
      ferryEvent(p, { key: 'b', version: 1 }),
    ]);
    boss = new PgBoss({ connectionString: fx.db.url, schema: fx.bossSchema, supervise: false, schedule: false, max: 2 });
    boss.on('error', () => {});
    await boss.start();
    const b = boss;
    // The park worker fails a/1 and b/1 at once (parkRetryLimit 0); a/2 waits behind a/1.
    const settled = await waitFor(
      async () => {
        const rows = await listParked({ boss: b, consumer: 'billing' });
        return rows.filter((r) => r.state === 'failed').length === 2 && rows.length === 3 ? rows : undefined;
      },
      { what: 'a/1 and b/1 failed in the park, a/2 behind a/1', timeoutMs: 20_000 },
    );
    const byKey = (rows: ParkedEvent[], key: string, version: string) => rows.find((r) => r.key === key && r.version === version);

    const listed = await ferry(fx, ['inbox', 'parked', 'list', '--consumer', 'billing', '--json']);
    assert.equal(listed.code, 0, listed.err);
    const json = JSON.parse(listed.out) as ParkedEvent[];
    assert.equal(json.length, 3);
    assert.equal(byKey(json, 'a', '1')?.reason, 'handler-failed');
    assert.equal(byKey(json, 'a', '2')?.reason, 'behind-parked');
    assert.match(byKey(json, 'a', '1')?.lastError ?? '', /broken for good/);
    const text = await ferry(fx, ['inbox', 'parked', 'list']);
    assert.equal(text.code, 0, text.err);
    assert.match(text.out, /key=a v1 Set/);
    assert.match(text.out, /reason=behind-parked/);

    const a1 = byKey(settled, 'a', '1')?.jobId ?? '';
    const discarded = await ferry(fx, ['inbox', 'parked', 'discard', a1, '--consumer', 'billing', '--yes']);
    assert.equal(discarded.code, 0, discarded.err);
    assert.match(discarded.out, /discarded 1 of 1/);
    await waitFor(async () => (await fx.effects()).some((e) => e.key === 'a' && e.version === '2'), {
      what: 'a/2 applied once a/1 was discarded',
      timeoutMs: 15_000,
    });
    const { rows } = await fx.db.pool.query(
      `SELECT version::text, parked FROM ${fx.s}.inbox_versions WHERE consumer = 'billing' AND key = 'a'`,
    );
    assert.deepEqual(rows[0], { version: '2', parked: 0 });

    failB = false;
    const b1 = byKey(settled, 'b', '1')?.jobId ?? '';
    const retried = await ferry(fx, ['inbox', 'parked', 'retry', b1, '--consumer', 'billing', '--json', '--yes']);
    assert.equal(retried.code, 0, retried.err);
    assert.deepEqual(JSON.parse(retried.out), { retried: 1, requested: 1 });
    await waitFor(async () => (await fx.effects()).some((e) => e.key === 'b'), { what: 'b/1 applied after retry', timeoutMs: 15_000 });
    const empty = await ferry(fx, ['inbox', 'parked', 'list', '--consumer', 'billing']);
    assert.equal(empty.out, 'no parked events');
    assert.deepEqual(await fx.effects(), [
      { key: 'a', version: '2' },
      { key: 'b', version: '1' },
    ]);

    const errLines: string[] = [];
    const bad = await ferry(fx, ['inbox', 'parked', 'retry', 'not-a-uuid', '--consumer', 'billing', '--yes']);
    assert.equal(bad.code, 2);
    assert.match(bad.err, /not a parked job id/);
    const missing = await main(['node', 'ferry', 'inbox', 'parked', 'list', '--database-url', fx.db.url, '--boss-schema', 'no_such_boss'], {
      out: () => {},
      err: (l) => errLines.push(l),
      env: {},
    });
    assert.equal(missing, 2);
    assert.match(errLines.join('\n'), /no pg-boss in schema "no_such_boss"/);
    const noConsumer = await ferry(fx, ['inbox', 'parked', 'discard', a1]);
    assert.equal(noConsumer.code, 2);
    assert.match(noConsumer.err, /--consumer/);
  });
});
