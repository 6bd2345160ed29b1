import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { waitFor } from '@ferry/testkit';
import { EFFECT_SQL, ferryEvent, type InboxFixture, inboxFixture, publishEvents } from './inbox-support.js';

let fx: InboxFixture;
before(async () => {
  fx = await inboxFixture();
});
after(() => fx.close());

test('inbox - a connection terminated while its handler runs neither crashes the process nor applies the effect twice', async () => {
  const sql = EFFECT_SQL(fx.s);
  let firstPid: number | undefined;
  let attempts = 0;
  const inbox = fx.inbox({
    mode: 'latest',
    handlers: {
      Set: async (event, ctx) => {
        attempts++;
        if (attempts === 1) {
          const { rows } = await ctx.tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
          firstPid = rows[0]?.pid;
          // The connection dies here, idle in this transaction, between two queries.
          await sleep(1_000);
        }
        await ctx.tx.query(sql.effect, [event.key, event.version.toString()]);
      },
    },
  });
  await inbox.start();
  await publishEvents(fx.stream.nc, [ferryEvent(fx.stream.prefix, { key: 'k1', version: 1 })]);
  const pid = await waitFor(() => firstPid, { what: 'the handler to start' });
  const killed = await fx.db.pool.query('SELECT pg_terminate_backend($1) AS ok', [pid]);
  assert.equal(killed.rows[0].ok, true);
  await waitFor(async () => (await fx.effects()).length === 1, { timeoutMs: 20_000, what: 'the redelivered event to apply' });
  await sleep(300);
  assert.deepEqual(await fx.effects(), [{ key: 'k1', version: '1' }]);
  assert.ok(attempts >= 2, 'the event was tried again after the lost connection');
  assert.equal(inbox.state, 'running');
});
