// Fencing where the bytes leave (issue 41). Two relays drain a preloaded backlog into a stream whose
// duplicate window (1 s) is shorter than every pause here, so a stale send would be stored twice, or
// after a newer version of its key:
// - relay A's lease connection is terminated while B polls every 100 ms: A stops sending at once, and
//   nothing A sends reaches NATS once B holds one of its lanes (before: B took them 786 ms after the
//   kill while A sent for 2.46 s more, 3,735 ids stored twice);
// - relay A's event loop is blocked past its term between a chain's lease check and the client's
//   buffer write (a large synchronous batch, a GC pause): on waking it writes nothing of that buffer.
import assert from 'node:assert/strict';
import { after, afterEach, before, test } from 'node:test';
import { quoteIdentifier } from '@ferry/core';
import { createRelayWithHooks } from '@ferry/relay/testing';
import { createTestDatabase, createTestStream, TcpProxy, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import { checkStream, countPending, describeCopies, type RelayProcess, readStream, spawnRelay } from './relay-helpers.js';

const TERM_MS = 3000;
const LANES = 8;

let db: TestDatabase;
let stream: TestStream | undefined;
let proxy: TcpProxy | undefined;
let procs: RelayProcess[] = [];

before(async () => {
  db = await createTestDatabase({ prefix: 'relay_lease_fence', lanes: LANES });
});

afterEach(async () => {
  for (const p of procs) if (p.proc.exitCode === null && p.proc.signalCode === null) p.proc.kill('SIGKILL');
  procs = [];
  await proxy?.close();
  proxy = undefined;
  await stream?.close();
  stream = undefined;
});

after(async () => {
  await db?.close();
});

const s = () => quoteIdentifier(db.schema);

/** `count` pending events over `keys` keys (versions 1, 2, … each), written as the table owner in one statement. */
async function preload(prefix: string, count: number, keys: number): Promise<string[]> {
  const { rows } = await db.pool.query<{ id: string }>(
    `INSERT INTO ${s()}.outbox (id, key, version, subject, type, source, content_type, data, occurred_at)
     SELECT gen_random_uuid(), $1 || (g % $2), g / $2 + 1, $3, 'OrderPlaced', 'test', 'application/json', '\\x7b7d', now()
       FROM generate_series(0, $4::int - 1) g
     RETURNING id`,
    [`${prefix}-k`, keys, `${prefix}.orders`, count],
  );
  return rows.map((r) => r.id);
}

interface Lease {
  owner: string | null;
  epoch: string;
}

/** Each lane's owner and epoch now. */
async function leases(): Promise<Map<number, Lease>> {
  const { rows } = await db.pool.query<{ lane: number; owner: string | null; epoch: string }>(
    `SELECT lane, owner, epoch::text AS epoch FROM ${s()}.relay_leases`,
  );
  return new Map(rows.map((r) => [r.lane, { owner: r.owner, epoch: r.epoch }]));
}

interface OwnerChange {
  at: number;
  lane: number;
  owner: string | null;
}

/** Reads the leases every 10 ms until stop(), and returns each change of a lane's owner with when it was seen. */
function ownerTimeline(): { stop: () => Promise<OwnerChange[]> } {
  const changes: OwnerChange[] = [];
  let running = true;
  const done = (async () => {
    const last = new Map<number, string>();
    while (running) {
      const now = await leases();
      const at = Date.now();
      for (const [lane, l] of now) {
        const key = `${l.owner}/${l.epoch}`;
        if (last.get(lane) !== key) changes.push({ at, lane, owner: l.owner });
        last.set(lane, key);
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  })();
  return {
    stop: async () => {
      running = false;
      await done;
      return changes;
    },
  };
}

/**
 * The owner of `lane` at `at` by the timeline: the last change seen at or before it. A change is seen up
 * to 10 ms after it happened, so a lane is counted as another's only from when that was seen; the
 * holder's fence ends 0.05 of the term (150 ms here) before another may take it.
 */
function ownerAt(changes: OwnerChange[], before: Map<number, Lease>, lane: number, at: number): string | null | undefined {
  let owner = before.get(lane)?.owner;
  for (const c of changes) {
    if (c.at > at) break;
    if (c.lane === lane) owner = c.owner;
  }
  return owner;
}

/** The lane of each outbox row by id. */
async function lanesOf(ids: string[]): Promise<Map<string, number>> {
  const { rows } = await db.pool.query<{ id: string; lane: number }>(
    `SELECT id::text, lane FROM ${s()}.outbox WHERE id = ANY ($1::uuid[])`,
    [[...new Set(ids)]],
  );
  return new Map(rows.map((r) => [r.id, r.lane]));
}

/** The instance id of the relay with this pid, from its lease connection's application_name (its log may not be flushed yet). */
async function instanceOf(p: RelayProcess): Promise<string> {
  return waitFor(
    async () => {
      const { rows } = await db.pool.query<{ name: string }>(
        `SELECT application_name AS name FROM pg_stat_activity WHERE application_name LIKE $1`,
        [`%:lease:${p.proc.pid}@%`],
      );
      return /^ferry-relay:([0-9a-f]+):lease:/.exec(rows[0]?.name ?? '')?.[1];
    },
    { timeoutMs: 20_000, what: `the lease connection of relay pid ${p.proc.pid}` },
  );
}

function relayArgs(natsUrl: string, pollMs: number): string[] {
  return [
    '--database-url',
    db.url,
    '--schema',
    db.schema,
    '--nats-url',
    natsUrl,
    '--no-maintenance',
    '--http-port',
    '0',
    '--poll-interval-ms',
    String(pollMs),
    '--lease-term-ms',
    String(TERM_MS),
    '--batch-size',
    '100',
    '--max-in-flight',
    '400',
  ];
}

/**
 * A proxy in front of the stream's NATS server that records each client-to-server chunk carrying
 * publishes: when it passed and the event ids (`Nats-Msg-Id`) in it. A message split across two chunks
 * is counted in the chunk holding its id header.
 */
async function natsProxy(): Promise<{ url: string; sends: Array<{ at: number; ids: string[] }> }> {
  const [host, port] = (stream as TestStream).nc
    .getServer()
    .replace(/^nats:\/\//, '')
    .split(':');
  proxy = await TcpProxy.start({ host: host ?? '127.0.0.1', port: Number(port ?? 4222) });
  const sends: Array<{ at: number; ids: string[] }> = [];
  proxy.tap((chunk) => {
    const ids = [...chunk.toString('latin1').matchAll(/Nats-Msg-Id: ([0-9a-f-]{36})/g)].map((m) => m[1] as string);
    if (ids.length > 0) sends.push({ at: Date.now(), ids });
  });
  return { url: `nats://127.0.0.1:${proxy.port}`, sends };
}

test('relay lease fence - A’s lease connection terminated while B polls every 100 ms and wants every lane: no publish of A reaches NATS for a lane another holds, and the stream keeps every key in order', async (t) => {
  stream = await createTestStream({ prefix: 'leasefencekill', duplicateWindowMs: 1000 });
  const ids = await preload(stream.prefix, 60_000, 2000);
  const { url, sends } = await natsProxy();
  const a = spawnRelay(relayArgs(url, 200));
  procs.push(a);
  await waitFor(async () => [...(await leases()).values()].filter((l) => l.owner !== null).length === LANES, {
    timeoutMs: 30_000,
    what: 'A holding every lane',
  });
  // B is under its share from the start (it wants all 8): it takes whatever becomes takeable on its next poll.
  const b = spawnRelay([...relayArgs(stream.nc.getServer(), 100), '--lanes-per-instance', String(LANES)]);
  procs.push(b);
  await waitFor(async () => (await countPending(db.pool, db.schema)) < 55_000, { timeoutMs: 60_000, what: 'the drain under way' });
  const aId = await instanceOf(a);
  const bId = await instanceOf(b);
  // Ownership is known from here on (B took its share of A's lanes before): earlier sends are not judged.
  const snapshotAt = Date.now();
  const before = await leases();
  const timeline = ownerTimeline();
  const killed = await db.pool.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE $1`, [
    `%:lease:${a.proc.pid}@%`,
  ]);
  const killedAt = Date.now();
  assert.equal(killed.rowCount, 1, 'A’s lease connection found and terminated');
  const takenAt = await waitFor(
    async () => {
      const now = await leases();
      return [...before].some(([lane, l]) => l.owner === aId && now.get(lane)?.owner === bId) ? Date.now() : undefined;
    },
    { timeoutMs: 30_000, intervalMs: 10, what: 'B holding a lane A held' },
  );
  await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 120_000, what: 'the backlog drained' });
  const changes = await timeline.stop();

  // Every publish A wrote to NATS, with the lane's owner by the database at that moment.
  const laneOf = await lanesOf(sends.filter((x) => x.at >= snapshotAt).flatMap((x) => x.ids));
  const foreign: string[] = [];
  for (const send of sends.filter((x) => x.at >= snapshotAt)) {
    for (const id of send.ids) {
      const lane = laneOf.get(id);
      assert.ok(lane !== undefined, `sent id ${id} is an outbox row`);
      const owner = ownerAt(changes, before, lane, send.at);
      if (owner !== undefined && owner !== aId)
        foreign.push(`${id} (lane ${lane}, held by ${owner}, ${send.at - killedAt} ms after the kill)`);
    }
  }
  const sentAtKill = sends.filter((x) => x.at > killedAt - 500 && x.at <= killedAt).length;
  t.diagnostic(
    `A wrote ${sentAtKill} publish chunks in the 500 ms before the kill; B held a lane of A’s ${takenAt - killedAt} ms after it; publishes of A on a lane another held: ${foreign.length}`,
  );
  assert.ok(sentAtKill > 0, 'A was sending when its lease connection was killed (else this proves nothing)');
  assert.deepEqual(foreign.slice(0, 5), [], `${foreign.length} publishes by A on lanes another instance held`);
  assert.match(a.output(), /lease connection ended/, 'A gave its lanes up when its lease connection ended');
  assert.match(b.output(), /lease taken: lane \d+ epoch \d+/, 'B took lanes');

  const again = checkStream(await readStream(stream.nc, stream.name, 60_000), ids);
  t.diagnostic(`${again.length} ids stored twice (takeover re-sends outside the 1 s window)`);
  for (const p of procs) p.proc.kill('SIGTERM');
  for (const p of procs) assert.equal((await p.exited).code, 0, p.output().slice(-2000));
});

test('relay lease fence - A’s event loop blocked past its term between a lease check and the buffer write (a large synchronous batch): on waking it writes nothing of that buffer, and nothing stale reaches the stream', async (t) => {
  stream = await createTestStream({ prefix: 'leasefenceblock', duplicateWindowMs: 1000 });
  const ids = await preload(stream.prefix, 40_000, 2000);
  // A reaches NATS directly: a proxy in this process would freeze with A and forward after the wake what A
  // had written before the block (bytes a real kernel sends at once), which is not what this test is about.
  const blockMs = TERM_MS + 3000;
  let handed = 0;
  let wokeAt = 0;
  const a = createRelayWithHooks(
    {
      databaseUrl: db.url,
      schema: db.schema,
      nats: { servers: stream.nc.getServer() },
      maintenance: false,
      pollIntervalMs: 200,
      leaseTermMs: TERM_MS,
      batchSize: 100,
      maxInFlight: 400,
    },
    {
      afterSend() {
        // Once, in the middle of the drain: the row just handed to the client is in its buffer, not on the wire.
        if (++handed !== 500) return;
        const until = Date.now() + blockMs;
        while (Date.now() < until) {
          // a synchronous batch that starves the event loop past the term
        }
        wokeAt = Date.now();
      },
    },
  );
  const b = spawnRelay(relayArgs(stream.nc.getServer(), 100));
  procs.push(b);
  try {
    await a.start();
    await waitFor(() => wokeAt > 0, { timeoutMs: 60_000, what: 'A blocked and woken' });
    await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 120_000, what: 'the backlog drained' });
    assert.match(b.output(), /lease taken: lane \d+ epoch \d+ from [0-9a-f]+, whose term ran out/, 'B took A’s lanes during the block');
    const events = await readStream(stream.nc, stream.name, 60_000);
    const again = checkStream(events, ids);
    // B's takeover re-sends happen during the block (it takes A's lanes one term after A's last renewal);
    // a copy stored after the wake could only be A's buffer, written after its lease had gone.
    const late = again.filter((c) => c.storedAt >= wokeAt);
    t.diagnostic(`${again.length} ids stored twice, ${late.length} of them after A woke`);
    assert.equal(
      late.length,
      0,
      `stored again after A woke:\n${late
        .slice(0, 3)
        .map((c) => describeCopies(events, c.id))
        .join('\n')}`,
    );
    // The 1 s window is shorter than the term plus the publish timeout: B says so when it first sends to the
    // stream (here right after the takeover: A held every lane first), and again on any later takeover.
    assert.match(
      b.output(),
      new RegExp(`"event":"duplicate-window-short".*stream ${stream.name}: duplicate window 1s is shorter than the lease term`),
    );
  } finally {
    await a.stop();
  }
  b.proc.kill('SIGTERM');
  assert.equal((await b.exited).code, 0, b.output().slice(-2000));
});
