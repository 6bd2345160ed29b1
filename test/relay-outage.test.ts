import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { quoteIdentifier } from '@ferry/core';
import { createRelay, type Relay, type RelayOptions } from '@ferry/relay';
import { createTestDatabase, createTestStream, NatsServer, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { assertExactlyOnceInKeyOrder, countPending, publishEvents, type RelayProcess, readStream, spawnRelay } from './relay-helpers.js';

/** How long NATS stays down. The figure is 30 s; CI uses 5 s (set FERRY_TEST_OUTAGE_MS=30000 for the full run). */
const OUTAGE_MS = Number(process.env.FERRY_TEST_OUTAGE_MS ?? 5000);

/** CPU seconds (user + system) a process has used, from /proc. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // After the command name: state is field 3, utime 14, stime 15 (1-based), so indexes 11 and 12 here.
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

interface LogLine {
  level: number;
  msg: string;
  time: number;
  event?: string;
}

function logLines(p: RelayProcess): LogLine[] {
  return p
    .output()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as LogLine);
}

describe('relay under NATS outages', () => {
  let db: TestDatabase;
  let nats: NatsServer;
  let stream: TestStream;
  let child: RelayProcess | undefined;
  let relay: Relay | undefined;

  /** A nats-server whose account RELAY has no JetStream: what a JetStream that is down looks like to the relay. */
  const withoutJetStream = () => NatsServer.start({ config: 'accounts { RELAY: { users: [{ user: relay, password: relay }] } }' });
  /** An in-process relay of this file's schema, connected to `server` as the RELAY user. */
  const relayOf = (server: NatsServer, options: Partial<RelayOptions>) =>
    createRelay({
      databaseUrl: db.url,
      schema: db.schema,
      nats: { servers: server.url, user: 'relay', pass: 'relay' },
      maintenance: false,
      listen: false,
      publishTimeoutMs: 500,
      ...options,
    });

  before(async () => {
    nats = await NatsServer.start();
    db = await createTestDatabase({ prefix: 'relay_outage', lanes: 8 });
    stream = await createTestStream({ servers: nats.url, prefix: 'outage', storage: 'file' });
  });

  after(async () => {
    if (child && child.proc.exitCode === null && child.proc.signalCode === null) child.proc.kill('SIGKILL');
    await relay?.stop();
    await stream?.close().catch(() => {});
    await nats?.stop();
    await db?.close();
  });

  test(`relay - nats-server stopped for ${OUTAGE_MS} ms under load: the relay idles, logs per state change, then drains with no loss or duplicate`, async (t) => {
    const ids = await publishEvents(db.pool, db.schema, stream.prefix, 10_000, { keys: 100, perTx: 500 });
    child = spawnRelay([
      '--database-url',
      db.url,
      '--schema',
      db.schema,
      '--nats-url',
      nats.url,
      '--no-maintenance',
      '--http-port',
      '0',
      '--batch-size',
      '100',
      '--max-in-flight',
      '300',
      '--publish-timeout-ms',
      '2000',
      '--breaker-cooldown-ms',
      '1000',
    ]);
    const pid = child.proc.pid as number;
    await waitFor(async () => (await countPending(db.pool, db.schema)) < 8000, { timeoutMs: 20_000, what: 'publishing to get going' });

    await nats.kill('SIGKILL');
    // Load goes on while NATS is down: the producer keeps committing.
    const during = publishEvents(db.pool, db.schema, stream.prefix, 1000, { keys: 100, perTx: 50 });
    await sleep(Math.min(2000, OUTAGE_MS / 3)); // in-flight PubAcks time out meanwhile
    const linesBefore = logLines(child).length;
    const cpu0 = cpuSeconds(pid);
    const t0 = performance.now();
    await sleep(OUTAGE_MS - Math.min(2000, OUTAGE_MS / 3));
    const cpu = cpuSeconds(pid) - cpu0;
    const wall = (performance.now() - t0) / 1000;
    const linesDuring = logLines(child).length - linesBefore;
    ids.push(...(await during));
    // A relay that cannot claim records no wait, so the commits of the outage sent no NOTIFY to wake it for nothing.
    const waiting = await db.pool.query(`SELECT count(*)::int AS n FROM ${quoteIdentifier(db.schema)}.relay_waiting WHERE until > now()`);
    assert.equal(waiting.rows[0].n, 0, 'no current wait record while NATS is down');

    await nats.restart();
    await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, {
      timeoutMs: 60_000,
      intervalMs: 200,
      what: 'the backlog to drain after NATS returned',
    });
    const logs = logLines(child);
    child.proc.kill('SIGTERM');
    assert.equal((await child.exited).code, 0);

    t.diagnostic(
      `relay CPU during the outage: ${((100 * cpu) / wall).toFixed(2)}% of a core over ${wall.toFixed(1)} s; ${linesDuring} log lines`,
    );
    assert.ok(cpu / wall < 0.05, `relay CPU during the outage: ${((100 * cpu) / wall).toFixed(1)}% of a core (limit 5%)`);
    assert.ok(linesDuring <= 3, `the relay logged ${linesDuring} lines while NATS stayed down`);
    assert.equal(logs.filter((l) => l.event === 'nats-disconnected').length, 1, 'the outage is logged once');
    assert.equal(logs.filter((l) => l.event === 'nats-reconnected').length, 1, 'the recovery is logged once');
    const fresh = await createTestStream({ servers: nats.url, prefix: 'outage_reader' });
    try {
      assertExactlyOnceInKeyOrder(await readStream(fresh.nc, stream.name), ids);
    } finally {
      await fresh.close();
    }
  });

  test('relay - JetStream not answering while NATS is up opens the circuit: claiming stops, one log per state change, then it recovers', async (t) => {
    const lines: Array<{ level: string; msg: string; state?: string; event?: string }> = [];
    const logger = {
      child: () => logger,
      trace: () => {},
      debug: () => {},
      info: (o: { state?: string }, msg?: string) => lines.push({ level: 'info', msg: msg ?? '', ...o }),
      warn: (o: { state?: string }, msg?: string) => lines.push({ level: 'warn', msg: msg ?? '', ...o }),
      error: (o: { state?: string }, msg?: string) => lines.push({ level: 'error', msg: msg ?? '', ...o }),
    };
    // The relay's account has no JetStream: every publish gets no responders, and so does JetStream's own
    // API (it answers 503), which is what a JetStream that is down looks like from the relay. (Rows on
    // subjects no stream binds, with JetStream up, never open the circuit: relay-breaker.test.ts.)
    const server = await withoutJetStream();
    let nc: NatsConnection | undefined;
    try {
      const name = 'BREAKER';
      const subject = 'breaker';
      const circuit: string[] = [];
      relay = relayOf(server, {
        batchSize: 20,
        breakerThreshold: 3,
        breakerCooldownMs: 1000,
        backoffBaseMs: 10,
        backoffMaxMs: 50,
        // Between JetStream's return and the stream's creation, no stream binds the subjects: every key's head
        // fails as the subject's fault each 10-50 ms and counts an attempt. That window is 8-36 ms, but a stream
        // add sent while the server reloads can go unanswered and wait out its request timeout: a 5 s window
        // took every head past the default 25 attempts, and the backlog never drained (1 run in 6 here).
        maxAttempts: 1000,
        logger,
      });
      relay.on('relay:circuit', (e) => circuit.push(e.state));
      const dead: string[] = [];
      relay.on('relay:row:dead', (e) => dead.push(e.id));
      const pendingState = async () =>
        (
          await db.pool.query<{ pending: number; attempts: number; dead: number }>(
            `SELECT count(*)::int AS pending, coalesce(sum(attempts), 0)::int AS attempts,
                    count(*) FILTER (WHERE dead_at IS NOT NULL)::int AS dead
               FROM ${quoteIdentifier(db.schema)}.outbox_pending`,
          )
        ).rows[0];
      await relay.start();
      const ids = [
        ...(await publishEvents(db.pool, db.schema, `${subject}.a`, 100, { keys: 100, perTx: 100, keyPrefix: 'a' })),
        ...(await publishEvents(db.pool, db.schema, `${subject}.b`, 100, { keys: 100, perTx: 100, keyPrefix: 'b' })),
      ];
      await waitFor(() => circuit.includes('open'), { timeoutMs: 15_000, what: 'the circuit to open' });
      const cpu0 = process.cpuUsage();
      const t0 = performance.now();
      await sleep(2500);
      const used = process.cpuUsage(cpu0);
      const share = (used.user + used.system) / 1000 / (performance.now() - t0);
      // A claim loop spinning while the circuit is open takes a whole core. This process also runs the test's
      // own pool and client: 3.9-4.9% of a core on b13bb0e and after the leases alike, so 5% failed under CI load.
      assert.ok(share < 0.1, `CPU while the circuit is open: ${(share * 100).toFixed(1)}% of a core`);
      const opened = circuit.filter((s) => s === 'open').length;
      assert.ok(opened >= 1 && opened <= 4, `the circuit opened ${opened} times in 2.5 s with a 1 s cool-down`);

      // JetStream comes back for the account (a config reload), and a stream binds the subjects. The test's
      // connection is made before the reload: one that arrives during it can be refused.
      const conn = await connect({ servers: server.url, user: 'relay', pass: 'relay' });
      nc = conn;
      // What the outage itself logged: after the reload below, until the stream is added, no stream binds
      // the subjects, and each head that fails so logs key-backing-off at its 1st, 2nd, 4th … attempt, as a
      // key backing off always does (a stream add lost in the reload made that window 1 s: 429 lines in CI).
      const outageLines = lines.length;
      const conf = join(server.storeDir, 'nats.conf');
      writeFileSync(conf, readFileSync(conf, 'utf8').replace('RELAY: {', 'RELAY: { jetstream: enabled,'));
      process.kill(server.pid ?? 0, 'SIGHUP');
      // A short request timeout: an add lost in the reload is sent again within 1 s, not after nats.js's 5 s.
      const jsm = await jetstreamManager(conn, { checkAPI: false, timeout: 1000 });
      await waitFor(
        async () =>
          jsm.streams.add({ name, subjects: [`${subject}.>`] }).then(
            () => true,
            () => false,
          ),
        { timeoutMs: 10_000, what: 'JetStream enabled for the account' },
      );
      await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, {
        timeoutMs: 20_000,
        what: 'the backlog to drain once JetStream answers',
      }).catch(async (err: Error) => {
        throw new Error(`${err.message}: ${JSON.stringify(await pendingState())}, circuit ${circuit.join(' > ')}`);
      });
      assert.deepEqual(dead, [], 'no row died');
      await waitFor(() => circuit.at(-1) === 'closed', { timeoutMs: 5000, what: 'the circuit to close' });
      assert.equal(lines.filter((l) => /circuit/.test(l.msg)).length, circuit.length, 'one log line per circuit state change');
      const byMsg = new Map<string, number>();
      for (const l of lines) byMsg.set(`${l.level} ${l.msg}`, (byMsg.get(`${l.level} ${l.msg}`) ?? 0) + 1);
      const top = JSON.stringify([...byMsg].sort((a, b) => b[1] - a[1]).slice(0, 6));
      assert.ok(outageLines < 30, `${outageLines} log lines for 200 events failing while JetStream was down: ${top}`);
      const others = lines.filter((l) => l.event !== 'key-backing-off').length;
      assert.ok(others < 30, `${others} log lines besides key-backing-off for 200 failing events: ${top}`);
      // On a failure, what the stream holds says whether the events were lost or not read back.
      const stored = (await jsm.streams.info(name)).state;
      const read = await readStream(conn, name);
      t.diagnostic(`stream ${name}: ${stored.messages} messages (seq ${stored.first_seq}-${stored.last_seq}), ${read.length} read back`);
      assertExactlyOnceInKeyOrder(read, ids);
    } finally {
      await relay?.stop();
      relay = undefined;
      await nc?.close();
      await server.stop();
    }
  });

  test('relay - a JetStream outage that outlasts --max-attempts probes kills no row: the probed heads back off and stay pending', async () => {
    // The same account without JetStream as above, never given it back. With 2 attempts allowed, each probe of a head
    // used to count toward its death: the first two probes of a key's head dead-lettered it, so any outage longer than
    // --max-attempts probes of a key (about 9 minutes at the defaults for a key alone) left it blocked until an operator
    // ran ferry dlq retry.
    const server = await withoutJetStream();
    try {
      const dead: string[] = [];
      relay = relayOf(server, {
        pollIntervalMs: 10,
        breakerThreshold: 1,
        breakerCooldownMs: 10,
        backoffBaseMs: 1,
        backoffMaxMs: 5,
        maxAttempts: 2,
      });
      relay.on('relay:row:dead', (e) => dead.push(e.id));
      await relay.start();
      await publishEvents(db.pool, db.schema, 'never_bound', 5, { keys: 1, perTx: 5, keyPrefix: 'solo' });
      const head = async () =>
        (
          await db.pool.query<{ attempts: number; dead: boolean }>(
            `SELECT attempts, dead_at IS NOT NULL AS dead FROM ${quoteIdentifier(db.schema)}.outbox_pending
              WHERE key = 'solo0' ORDER BY seq LIMIT 1`,
          )
        ).rows[0];
      const seen = await waitFor(
        async () => {
          const h = await head();
          return h && (h.dead || h.attempts >= 6) ? h : undefined;
        },
        { timeoutMs: 20_000, what: "the key's head to be probed 6 times" },
      );
      assert.deepEqual(dead, [], `rows died of the outage (head: ${JSON.stringify(seen)})`);
      assert.equal(seen.dead, false);
      assert.equal(await countPending(db.pool, db.schema), 5, 'every row of the key still waits, in order, for JetStream');
    } finally {
      await relay?.stop();
      relay = undefined;
      await server.stop();
    }
  });
});
