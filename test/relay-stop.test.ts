// Issue 29: the relay's stop() settles its in-flight chains. Stopped in the
// middle of a drain, it resolves only after every row it sent has its PubAck
// and is marked published: right after stop() the stream holds exactly the
// rows the outbox calls published, so the next relay (a rolling restart)
// re-sends nothing and waits on nothing.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { quoteIdentifier } from '@ferry/core';
import { createRelay } from '@ferry/relay';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import { assertExactlyOnceInKeyOrder, countPending, publishEvents, readStream } from './relay-helpers.js';

let db: TestDatabase;
let stream: TestStream;

before(async () => {
  db = await createTestDatabase({ prefix: 'relay_stop', lanes: 4 });
  stream = await createTestStream({ prefix: 'relaystop' });
});

after(async () => {
  await stream?.close();
  await db?.close();
});

test('relay - stop() mid-drain returns only after every row it sent is acked and marked; the next relay finishes the rest', async (t) => {
  const ids = await publishEvents(db.pool, db.schema, stream.prefix, 8_000, { keys: 40, perTx: 2_000 });
  const options = { databaseUrl: db.url, schema: db.schema, nats: { servers: stream.nc.getServer() }, maintenance: false };
  const total = ids.length;
  const s = quoteIdentifier(db.schema);
  const stops: Array<{ published: number; inStream: number }> = [];
  // Three restarts, each stopping a relay while its chains are in flight.
  for (let round = 0; round < 3; round++) {
    const relay = createRelay(options);
    const before = total - (await countPending(db.pool, db.schema));
    try {
      await relay.start();
      // Mid-drain: it published rows of this round; or, when an earlier round's relay finished the backlog
      // while it stopped (the mark got faster with outbox migration 000015), there is nothing left to wait for.
      await waitFor(
        async () => {
          const pending = await countPending(db.pool, db.schema);
          return pending === 0 || total - pending > before;
        },
        {
          timeoutMs: 30_000,
          intervalMs: 20,
          what: 'the relay to be mid-drain',
        },
      );
    } finally {
      await relay.stop();
    }
    const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${s}.outbox_events WHERE published_at IS NOT NULL`);
    const info = await stream.jsm.streams.info(stream.name);
    stops.push({ published: rows[0]?.n ?? -1, inStream: info.state.messages });
  }
  t.diagnostic(`published after each stop: ${stops.map((st) => st.published).join(', ')} of ${total}`);
  // A fast relay may finish the backlog during a later stop's drain: at least the first stop is mid-drain.
  assert.ok((stops[0]?.published ?? total) < total, `the first stop came mid-drain (${stops[0]?.published} of ${total} published)`);
  for (const [i, st] of stops.entries()) {
    assert.equal(st.inStream, st.published, `stop ${i + 1}: every row the stream holds is marked published, none left in flight`);
  }
  const last = createRelay(options);
  await last.start();
  try {
    await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 60_000, what: 'the outbox to drain' });
  } finally {
    await last.stop();
  }
  assertExactlyOnceInKeyOrder(await readStream(stream.nc, stream.name), ids);
});
