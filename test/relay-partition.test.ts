// One of two relays cut off, through a TCP proxy the test owns (the shared servers are never touched):
// from PostgreSQL (a blackhole that resets nothing, then a half-open connection), and from NATS. Its
// lanes go to the other relay within the lease term plus a poll, and the stream keeps every event
// once, in per-key order.
import assert from 'node:assert/strict';
import { after, afterEach, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createTestDatabase, createTestStream, TcpProxy, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import {
  assertExactlyOnceInKeyOrder,
  countPending,
  type RelayProcess,
  readStream,
  spawnRelay,
  steadyLoad,
  waitsDuring,
} from './relay-helpers.js';

const TERM_MS = 3000;
const POLL_MS = 200;
const CUT_MS = 12_000;

let db: TestDatabase;
let stream: TestStream;
let procs: RelayProcess[] = [];
let proxy: TcpProxy | undefined;

before(async () => {
  db = await createTestDatabase({ prefix: 'relay_partition', lanes: 16 });
});

afterEach(async () => {
  for (const p of procs) if (p.proc.exitCode === null && p.proc.signalCode === null) p.proc.kill('SIGKILL');
  procs = [];
  await proxy?.close();
  proxy = undefined;
  await stream?.close();
});

after(async () => {
  await db?.close();
});

function relay(databaseUrl: string, natsUrl: string): RelayProcess {
  const p = spawnRelay([
    '--database-url',
    databaseUrl,
    '--schema',
    db.schema,
    '--nats-url',
    natsUrl,
    '--no-maintenance',
    '--http-port',
    '0',
    '--poll-interval-ms',
    String(POLL_MS),
    '--lease-term-ms',
    String(TERM_MS),
    '--nats-ping-interval-ms',
    '1000',
    '--pg-keepalive-ms',
    '2000',
  ]);
  procs.push(p);
  return p;
}

/** The database's clock now: what bothHoldLanes compares renewals with. */
async function dbNow(): Promise<Date> {
  const { rows } = await db.pool.query<{ now: Date }>('SELECT now() AS now');
  return rows[0]?.now as Date;
}

/**
 * Two owners hold lanes with leases renewed since `since`: the relays of this test. The previous
 * test's relays, SIGKILLed moments ago, still own unexpired leases for up to a term, and counting
 * them let the cut begin before the relay behind the proxy had started at all.
 */
async function bothHoldLanes(since: Date): Promise<void> {
  await waitFor(
    async () => {
      const { rows } = await db.pool.query<{ n: number }>(
        `SELECT count(DISTINCT owner)::int AS n FROM ${db.schema}.relay_leases WHERE expires_at > now() AND renewed_at >= $1`,
        [since],
      );
      return rows[0]?.n === 2;
    },
    { timeoutMs: 20_000, what: 'both relays holding lanes' },
  );
}

/** Runs the load through a cut of CUT_MS made and ended by `cut`/`heal`, then checks the wait bound and the stream. */
async function underLoad(t: { diagnostic: (s: string) => void }, cut: () => void, heal: () => void): Promise<void> {
  const traffic = steadyLoad(db.pool, db.schema, stream.prefix, 200);
  await sleep(3000);
  cut();
  const cutAt = Date.now();
  await sleep(CUT_MS);
  heal();
  await sleep(5000);
  const ids = await traffic.stop();
  await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 60_000, what: 'every event published' });
  const w = await waitsDuring(db.pool, db.schema, cutAt, cutAt + CUT_MS);
  t.diagnostic(`${w.n} events committed during the cut: longest wait ${w.maxMs.toFixed(0)} ms, p99 ${w.p99Ms.toFixed(0)} ms`);
  // The term, a poll, and the cut relay's NATS ping or renewal period; 2 s for a loaded 2-core box.
  assert.ok(w.maxMs < TERM_MS + POLL_MS + 2000, `an event waited ${w.maxMs} ms`);
  const events = await readStream(stream.nc, stream.name);
  t.diagnostic(`${ids.length} events committed, ${events.length} in the stream`);
  assertExactlyOnceInKeyOrder(events, ids);
}

test('relay partition - cut off from PostgreSQL (blackhole, then half-open): the other relay takes its lanes within the term; order and once kept', async (t) => {
  stream = await createTestStream({ prefix: 'relaypartpg', duplicateWindowMs: 10_000 });
  const url = new URL(db.url);
  proxy = await TcpProxy.start({ host: url.hostname, port: Number(url.port || 5432) });
  url.hostname = '127.0.0.1';
  url.port = String(proxy.port);
  const since = await dbNow();
  const cut = relay(url.toString(), stream.nc.getServer());
  const other = relay(db.url, stream.nc.getServer());
  await bothHoldLanes(since);
  const p = proxy;
  await underLoad(
    t,
    () => p.blackhole(),
    () => p.halfOpen(),
  );
  assert.match(other.output(), /lease taken: lane \d+ epoch \d+ from [0-9a-f]+, whose term ran out/);
  assert.match(cut.output(), /lease lost/);
});

for (const end of ['healed', 'half-open'] as const) {
  test(`relay partition - cut off from NATS, then ${end === 'healed' ? 'healed' : 'left half-open (its side of the connection gone, the server’s still open)'}: it gives its lanes up and the relay that reaches NATS takes them; nothing it buffered reaches the stream; order and once kept`, async (t) => {
    stream = await createTestStream({ prefix: end === 'healed' ? 'relaypartnats' : 'relaypartnatsho', duplicateWindowMs: 10_000 });
    const nats = new URL(stream.nc.getServer().includes('://') ? stream.nc.getServer() : `nats://${stream.nc.getServer()}`);
    proxy = await TcpProxy.start({ host: nats.hostname, port: Number(nats.port || 4222) });
    const since = await dbNow();
    const cut = relay(db.url, `nats://127.0.0.1:${proxy.port}`);
    const other = relay(db.url, stream.nc.getServer());
    await bothHoldLanes(since);
    const p = proxy;
    await underLoad(
      t,
      () => p.blackhole(),
      () => (end === 'healed' ? p.heal() : p.halfOpen()),
    );
    assert.match(cut.output(), /lease lost: lane \d+ epoch \d+ \(released: this instance cannot reach NATS\)/);
    assert.match(other.output(), /lease taken: lane \d+/);
  });
}
