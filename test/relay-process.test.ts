import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, afterEach, before, describe, test } from 'node:test';
import { quoteIdentifier } from '@ferry/core';
import { createTestDatabase, createTestStream, freePort, NatsServer, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import {
  assertExactlyOnceInKeyOrder,
  countPending,
  FERRY_BIN,
  publishEvents,
  type RelayProcess,
  readStream,
  spawnRelay,
} from './relay-helpers.js';

const PASSWORD = 'Sup3r-s3cret-pw';

describe('relay as a process: kill, drain, logs, HTTP', () => {
  let db: TestDatabase;
  let stream: TestStream;
  const procs: RelayProcess[] = [];

  function start(extra: string[] = [], env: NodeJS.ProcessEnv = {}): RelayProcess {
    const p = spawnRelay(
      [
        '--database-url',
        db.url,
        '--schema',
        db.schema,
        '--nats-url',
        stream.nc.getServer(),
        '--no-maintenance',
        '--http-port',
        '0',
        '--batch-size',
        '200',
        ...extra,
      ],
      env,
    );
    procs.push(p);
    return p;
  }

  async function published(): Promise<number> {
    const { rows } = await db.pool.query<{ n: string }>(
      `SELECT count(*)::text AS n FROM ${quoteIdentifier(db.schema)}.outbox_events WHERE published_at IS NOT NULL`,
    );
    return Number(rows[0]?.n);
  }

  before(async () => {
    db = await createTestDatabase({ prefix: 'relay_proc', lanes: 8 });
    stream = await createTestStream({ prefix: 'relayproc' });
  });

  /** A test that failed half-way must not leave its relay running into the next test. */
  afterEach(async () => {
    for (const p of procs) {
      if (p.proc.exitCode === null && p.proc.signalCode === null) {
        p.proc.kill('SIGKILL');
        await p.exited;
      }
    }
  });

  /** Waits until the relay logged that it runs (its signal handlers are in place by then). */
  async function running(p: RelayProcess): Promise<void> {
    await waitFor(() => p.output().includes('"event":"started"'), { timeoutMs: 30_000, what: 'the relay to start' });
  }

  after(async () => {
    for (const p of procs) if (p.proc.exitCode === null && p.proc.signalCode === null) p.proc.kill('SIGKILL');
    await stream?.close();
    await db?.close();
  });

  test('relay - SIGKILL mid-batch and a restart lose nothing and duplicate nothing in the stream', async () => {
    const ids = await publishEvents(db.pool, db.schema, stream.prefix, 10_000, { keys: 200, perTx: 500 });
    const first = start();
    await waitFor(async () => (await published()) >= 1000, { timeoutMs: 30_000, what: 'the first relay to publish some rows' });
    first.proc.kill('SIGKILL');
    const exit = await first.exited;
    assert.equal(exit.signal, 'SIGKILL');
    const left = await countPending(db.pool, db.schema);
    assert.ok(left > 0, 'the relay was killed with rows still unpublished');
    const second = start();
    await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 60_000, what: 'the restarted relay to drain' });
    assertExactlyOnceInKeyOrder(await readStream(stream.nc, stream.name), ids);
    second.proc.kill('SIGTERM');
    assert.equal((await second.exited).code, 0);
  });

  test('relay - SIGTERM drains: exit 0, and every event in the stream is marked published', async () => {
    await publishEvents(db.pool, db.schema, stream.prefix, 10_000, { keys: 200, perTx: 500 });
    const before = await published();
    const p = start(['--max-in-flight', '4000']);
    await running(p);
    await waitFor(async () => (await published()) >= before + 1000, { timeoutMs: 30_000, what: 'the relay to publish some rows' });
    p.proc.kill('SIGTERM');
    const exit = await p.exited;
    assert.equal(exit.code, 0, p.output().slice(-2000));
    assert.match(p.output(), /"event":"draining"/);
    assert.match(p.output(), /"event":"stopped"/);
    const inStream = new Set((await readStream(stream.nc, stream.name)).map((e) => e.id));
    const { rows } = await db.pool.query<{ id: string }>(
      `SELECT id::text FROM ${quoteIdentifier(db.schema)}.outbox_events WHERE published_at IS NULL`,
    );
    assert.ok(rows.length > 0, 'the drain stopped before the backlog was empty (the test shows a mid-run stop)');
    const acknowledgedButUnmarked = rows.filter((r) => inStream.has(r.id));
    assert.equal(acknowledgedButUnmarked.length, 0, 'nothing acknowledged is left unmarked');
    const rest = start();
    await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 60_000, what: 'the rest to drain' });
    rest.proc.kill('SIGTERM');
    assert.equal((await rest.exited).code, 0);
  });

  test('relay - the database password never appears in the log output', async () => {
    const url = new URL(db.url);
    url.username = 'postgres';
    url.password = PASSWORD;
    const port = await freePort();
    const p = spawnRelay(
      [
        '--schema',
        db.schema,
        '--nats-url',
        stream.nc.getServer(),
        '--nats-user',
        'relay',
        '--nats-password',
        `${PASSWORD}-nats`,
        '--no-maintenance',
        '--log-level',
        'trace',
        '--http-port',
        String(port),
      ],
      { FERRY_DATABASE_URL: url.toString() },
    );
    procs.push(p);
    await waitFor(() => p.output().includes('"event":"started"'), { timeoutMs: 15_000, what: 'the relay to start' });
    await publishEvents(db.pool, db.schema, stream.prefix, 100, { keys: 10 });
    await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 15_000, what: 'a drain' });

    const health = await fetch(`http://127.0.0.1:${port}/healthz`);
    assert.equal(health.status, 200);
    const ready = await fetch(`http://127.0.0.1:${port}/readyz`);
    assert.equal(ready.status, 200, await ready.text());
    const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    for (const name of [
      'ferry_events_published_total',
      'ferry_publish_failures_total',
      'ferry_outbox_backlog',
      'ferry_outbox_oldest_pending_seconds',
      'ferry_batch_duration_seconds',
      'ferry_commit_to_ack_seconds',
      'ferry_dead_events',
      'ferry_lanes_owned',
      'ferry_nats_connected 1',
      'ferry_circuit_state 0',
    ]) {
      assert.ok(metrics.includes(name), `/metrics has ${name}`);
    }
    assert.match(metrics, /ferry_events_published_total 100/);

    p.proc.kill('SIGTERM');
    assert.equal((await p.exited).code, 0);
    const out = p.output();
    assert.match(out, /postgres:\*\*\*@/, 'the URL is logged with its password masked');
    assert.ok(!out.includes(PASSWORD), 'no password in the log');
  });

  test('relay - NATS token auth from FERRY_NATS_TOKEN works and the token never appears in the log', async () => {
    const token = 'tok-7f3a9c2e5b1d';
    const server = await NatsServer.start({ config: `authorization { token: "${token}" }` });
    try {
      const nc = await connect({ servers: server.url, token });
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: 'TOKEN', subjects: ['relaytoken.>'] });
      try {
        const ids = await publishEvents(db.pool, db.schema, 'relaytoken', 50, { keys: 5 });
        const p = spawnRelay(
          [
            '--database-url',
            db.url,
            '--schema',
            db.schema,
            '--nats-url',
            server.url,
            '--no-maintenance',
            '--http-port',
            '0',
            '--log-level',
            'debug',
          ],
          { FERRY_NATS_TOKEN: token },
        );
        procs.push(p);
        await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, {
          timeoutMs: 20_000,
          what: 'a drain through the token-protected server',
        });
        const events = await readStream(nc, 'TOKEN');
        assert.deepEqual(new Set(events.map((e) => e.id)), new Set(ids));
        p.proc.kill('SIGTERM');
        assert.equal((await p.exited).code, 0);
        assert.ok(!p.output().includes(token), 'no token in the log');
      } finally {
        await nc.close();
      }
    } finally {
      await server.stop();
    }
  });

  test('relay - a second signal, or the shutdown timeout, forces exit 4 when draining cannot finish', async () => {
    // A NATS of the test's own, frozen (SIGSTOP) under a running relay: the connection stays open
    // but nothing answers, so draining it cannot finish. (A relay still waiting for an unreachable
    // NATS no longer serves here: it stops at once, see relay-start.test.ts.)
    const nats = await NatsServer.start();
    const freeze = (sig: NodeJS.Signals) => process.kill(nats.pid as number, sig);
    try {
      const args = ['--database-url', db.url, '--schema', db.schema, '--nats-url', nats.url, '--no-maintenance', '--http-port', '0'];
      const byTimeout = spawnRelay([...args, '--shutdown-timeout-ms', '500']);
      procs.push(byTimeout);
      await running(byTimeout);
      freeze('SIGSTOP');
      byTimeout.proc.kill('SIGTERM');
      const timedOut = await byTimeout.exited;
      assert.equal(timedOut.code, 4, `${JSON.stringify(timedOut)} ${byTimeout.output().slice(-1500)}`);
      assert.match(byTimeout.output(), /forced exit: draining took longer than 500 ms/);
      freeze('SIGCONT');

      const bySignal = spawnRelay(args);
      procs.push(bySignal);
      await running(bySignal);
      freeze('SIGSTOP');
      bySignal.proc.kill('SIGTERM');
      await waitFor(() => bySignal.output().includes('"event":"signal"'), { timeoutMs: 5000, what: 'the first signal to be seen' });
      bySignal.proc.kill('SIGINT');
      const signalled = await bySignal.exited;
      assert.equal(signalled.code, 4, `${JSON.stringify(signalled)} ${bySignal.output().slice(-1500)}`);
      assert.match(bySignal.output(), /forced exit: second signal SIGINT/);
    } finally {
      freeze('SIGCONT');
      await nats.stop();
    }
  });

  test('relay - an invalid option value exits 2 with one line naming the option, the value and what is accepted', () => {
    const cases: Array<[string[], NodeJS.ProcessEnv, RegExp]> = [
      [['--batch-size', '0'], {}, /--batch-size.*'0'.*integer from 1 to 10000/],
      [['--retention', 'forever'], {}, /--retention.*'forever'.*duration/],
      [['--lanes-per-instance', 'many'], {}, /--lanes-per-instance.*'many'.*"auto" or an integer/],
      [['--nats-url', 'http://x y'], {}, /--nats-url.*not a list of NATS URLs/],
      [['--log-level', 'loud'], {}, /--log-level.*'loud'.*Allowed choices/],
      [['--ensure-stream', 'ORDERS'], {}, /--ensure-stream.*NAME=SUBJECT/],
      [[], { FERRY_MAX_IN_FLIGHT: 'lots' }, /--max-in-flight.*'lots'.*FERRY_MAX_IN_FLIGHT/],
      [[], { FERRY_LISTEN: 'perhaps' }, /FERRY_LISTEN "perhaps" is not a boolean/],
    ];
    for (const [args, env, pattern] of cases) {
      const r = spawnSync(process.execPath, [FERRY_BIN, 'relay', '--database-url', db.url, ...args], {
        env: { ...process.env, ...env },
        encoding: 'utf8',
        timeout: 60_000, // generous: a loaded 2-core machine starts node slowly
      });
      assert.equal(r.status, 2, `${args.join(' ')} ${JSON.stringify(env)}: exit ${r.status}: ${r.stderr}`);
      const lines = r.stderr.trim().split('\n');
      assert.equal(lines.length, 1, `one line: ${r.stderr}`);
      assert.match(lines[0] ?? '', pattern);
    }
  });
});
