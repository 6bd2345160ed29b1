// A lock held on one of the relay's tables while two relays run under load (issue 41): the lease table
// (every renewal and take waits, each bounded by a third of the term) and the pending table (every claim
// and mark waits, bounded by --pg-statement-timeout-ms). Nothing is lost, stored out of order or stored
// after a newer version, and once the lock ends publishing resumes within one poll plus one renewal.
import assert from 'node:assert/strict';
import { after, afterEach, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { quoteIdentifier } from '@ferry/core';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import { assertExactlyOnceInKeyOrder, countPending, type RelayProcess, readStream, spawnRelay, steadyLoad } from './relay-helpers.js';

const TERM_MS = 9000;
const POLL_MS = 200;
const LOCK_MS = 20_000;

let db: TestDatabase;
let stream: TestStream | undefined;
let procs: RelayProcess[] = [];

before(async () => {
  db = await createTestDatabase({ prefix: 'relay_lease_lock', lanes: 8 });
});

afterEach(async () => {
  for (const p of procs) if (p.proc.exitCode === null && p.proc.signalCode === null) p.proc.kill('SIGKILL');
  procs = [];
  await stream?.close();
  stream = undefined;
});

after(async () => {
  await db?.close();
});

/**
 * The first mark after the unlock, in ms after it (by the database's clock): publishing resumed. A mark
 * queued behind the lock records the moment its statement started, before the unlock, so it is not
 * counted.
 */
async function resumedAfterMs(unlockedAt: number): Promise<number> {
  const { rows } = await db.pool.query<{ ms: number | null }>(
    `SELECT (extract(epoch FROM min(published_at)) * 1000 - $1)::float8 AS ms
       FROM ${quoteIdentifier(db.schema)}.outbox_events WHERE published_at >= to_timestamp($1 / 1000.0)`,
    [unlockedAt],
  );
  const ms = rows[0]?.ms;
  assert.ok(ms !== null && ms !== undefined, 'events were published after the unlock');
  return ms;
}

for (const table of ['relay_leases', 'outbox_pending'] as const) {
  test(`relay lease lock - ${table} locked ACCESS EXCLUSIVE for ${LOCK_MS / 1000} s under load: nothing lost or stale, and publishing resumes within one poll plus one renewal of the unlock`, async (t) => {
    stream = await createTestStream({ prefix: `leaselock${table.replace('_', '')}` });
    const args = [
      '--database-url',
      db.url,
      '--schema',
      db.schema,
      '--nats-url',
      stream.nc.getServer(),
      '--no-maintenance',
      '--http-port',
      '0',
      '--poll-interval-ms',
      String(POLL_MS),
      '--lease-term-ms',
      String(TERM_MS),
      '--pg-statement-timeout-ms',
      '5000',
    ];
    for (let i = 0; i < 2; i++) procs.push(spawnRelay(args));
    await waitFor(
      async () => {
        const { rows } = await db.pool.query<{ n: number }>(
          `SELECT count(DISTINCT owner)::int AS n FROM ${quoteIdentifier(db.schema)}.relay_leases WHERE owner IS NOT NULL AND expires_at > now()`,
        );
        return rows[0]?.n === 2;
      },
      { timeoutMs: 30_000, what: 'two relays holding lanes' },
    );
    const traffic = steadyLoad(db.pool, db.schema, stream.prefix, 200);
    await sleep(2000);
    const locker = await db.pool.connect();
    let lockedAt = 0;
    let unlockedAt = 0;
    try {
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE ${quoteIdentifier(db.schema)}.${table} IN ACCESS EXCLUSIVE MODE`);
      lockedAt = Date.now();
      await sleep(LOCK_MS);
      await locker.query('COMMIT');
      unlockedAt = Date.now();
    } finally {
      locker.release();
    }
    await sleep(3000);
    const ids = await traffic.stop();
    await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 60_000, what: 'every event published' });
    const resumed = await resumedAfterMs(unlockedAt);
    t.diagnostic(`lock held ${unlockedAt - lockedAt} ms`);
    // One poll plus one renewal (a third of the term), plus the claim and send on a loaded 2-core box.
    const bound = POLL_MS + TERM_MS / 3 + 1500;
    t.diagnostic(`publishing resumed ${resumed.toFixed(0)} ms after the unlock (bound ${bound} ms)`);
    assert.ok(resumed <= bound, `publishing resumed ${resumed.toFixed(0)} ms after the unlock`);
    const events = await readStream(stream.nc, stream.name);
    assertExactlyOnceInKeyOrder(events, ids);
    for (const p of procs) p.proc.kill('SIGTERM');
    for (const p of procs) assert.equal((await p.exited).code, 0, p.output().slice(-2000));
  });
}
