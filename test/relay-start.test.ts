import assert from 'node:assert/strict';
import { after, afterEach, before, test } from 'node:test';
import { createRelay } from '@ferry/relay';
import { createTestDatabase, freePort, NatsServer, type TestDatabase, waitFor } from '@ferry/testkit';
import { type RelayProcess, spawnRelay } from './relay-helpers.js';

// A relay started before NATS (a pod that comes up first, a NATS restart at deploy time):
// it must say that it waits, report not-ready, and stop promptly on a signal (issue 16, item 7).

let db: TestDatabase;
const procs: RelayProcess[] = [];
let nats: NatsServer | undefined;

before(async () => {
  db = await createTestDatabase({ prefix: 'relay_start' });
});
afterEach(async () => {
  for (const p of procs.splice(0)) {
    if (p.proc.exitCode === null && p.proc.signalCode === null) {
      p.proc.kill('SIGKILL');
      await p.exited;
    }
  }
  await nats?.stop();
  nats = undefined;
});
after(async () => {
  await db?.close();
});

function start(natsPort: number, httpPort: number, ...extra: string[]): RelayProcess {
  const p = spawnRelay([
    '--database-url',
    db.url,
    '--schema',
    db.schema,
    '--nats-url',
    `nats://127.0.0.1:${natsPort}`,
    '--no-maintenance',
    '--http-port',
    String(httpPort),
    ...extra,
  ]);
  procs.push(p);
  return p;
}

const readyz = async (port: number) => (await fetch(`http://127.0.0.1:${port}/readyz`)).status;
const lines = (p: RelayProcess, event: string) =>
  p
    .output()
    .split('\n')
    .filter((l) => l.includes(`"event":"${event}"`));

test('relay start - NATS unreachable: logs once that it waits, /readyz is 503, SIGINT stops it at once with exit 0', async () => {
  const natsPort = await freePort();
  const httpPort = await freePort();
  const p = start(natsPort, httpPort);
  await waitFor(() => lines(p, 'nats-waiting').length > 0, { timeoutMs: 15_000, what: 'the waiting-for-NATS line' });
  assert.match(lines(p, 'nats-waiting')[0] ?? '', new RegExp(`waiting for NATS at 127\\.0\\.0\\.1:${natsPort}`));
  assert.equal(await readyz(httpPort), 503);
  await new Promise((r) => setTimeout(r, 2_500)); // two more connection attempts, each refused
  assert.equal(lines(p, 'nats-waiting').length, 1, 'logged once per state change, not once per attempt');
  const t0 = Date.now();
  p.proc.kill('SIGINT');
  const { code } = await p.exited;
  const ms = Date.now() - t0;
  assert.equal(code, 0, p.output());
  assert.ok(ms < 3_000, `stopped in ${ms} ms`);
  assert.doesNotMatch(p.output(), /forced exit|failed to start/);
});

test('relay start - NATS that comes up later: the relay logs it once, starts and reports ready', async () => {
  const natsPort = await freePort();
  const httpPort = await freePort();
  const p = start(natsPort, httpPort);
  await waitFor(() => lines(p, 'nats-waiting').length > 0, { timeoutMs: 15_000, what: 'the waiting-for-NATS line' });
  nats = await NatsServer.start({ port: natsPort });
  await waitFor(() => lines(p, 'started').length > 0, { timeoutMs: 15_000, what: 'the relay to start' });
  assert.equal(lines(p, 'nats-available').length, 1);
  await waitFor(async () => (await readyz(httpPort)) === 200, { timeoutMs: 10_000, what: '/readyz 200' });
  p.proc.kill('SIGTERM');
  assert.equal((await p.exited).code, 0, p.output());
});

/** The HTTP status at `host`, or the socket error's code when nothing listens there. */
async function statusAt(host: string, port: number): Promise<number | string> {
  try {
    return (await fetch(`http://${host}:${port}/healthz`)).status;
  } catch (err) {
    return ((err as Error).cause as NodeJS.ErrnoException | undefined)?.code ?? String(err);
  }
}

test('relay start - /metrics, /healthz and /readyz listen on 127.0.0.1 only by default; --http-host 0.0.0.0 opens them', async () => {
  const natsPort = await freePort();
  const httpPort = await freePort();
  const p = start(natsPort, httpPort);
  await waitFor(() => lines(p, 'http-listening').length > 0, { timeoutMs: 15_000, what: 'the http-listening line' });
  assert.match(lines(p, 'http-listening')[0] ?? '', new RegExp(`"address":"127\\.0\\.0\\.1:${httpPort}"`));
  assert.equal(await statusAt('127.0.0.1', httpPort), 200);
  // 127.0.0.2 is this host too (the whole 127/8 is loopback), but not the address the server took.
  assert.equal(await statusAt('127.0.0.2', httpPort), 'ECONNREFUSED');
  p.proc.kill('SIGINT');
  assert.equal((await p.exited).code, 0);

  const open = start(natsPort, httpPort, '--http-host', '0.0.0.0');
  await waitFor(() => lines(open, 'http-listening').length > 0, { timeoutMs: 15_000, what: 'the http-listening line' });
  assert.match(lines(open, 'http-listening')[0] ?? '', new RegExp(`"address":"0\\.0\\.0\\.0:${httpPort}"`));
  assert.equal(await statusAt('127.0.0.2', httpPort), 200);
  open.proc.kill('SIGINT');
  assert.equal((await open.exited).code, 0);
});

test('relay start - an --http-host that is no address of this host exits 2 with one line naming the flag', async () => {
  // 203.0.113.0/24 is TEST-NET-3: never an address of this machine.
  const p = start(await freePort(), await freePort(), '--http-host', '203.0.113.7');
  const { code } = await p.exited;
  assert.equal(code, 2, p.output());
  assert.match(
    p.output().trim().split('\n').at(-1) ?? '',
    /^ferry: --http-host 203\.0\.113\.7 is not an address of this host \(EADDRNOTAVAIL\)/,
  );
  const bad = start(await freePort(), await freePort(), '--http-host', 'not a host!');
  assert.equal((await bad.exited).code, 2);
  assert.match(bad.output(), /--http-host.*is not an address to listen on/);
});

test('relay start - a second relay on a used --http-port exits 2 with one line naming the flag', async () => {
  const httpPort = await freePort();
  const first = start(await freePort(), httpPort);
  await waitFor(() => lines(first, 'nats-waiting').length > 0, { timeoutMs: 15_000, what: 'the first relay to listen' });
  const second = start(await freePort(), httpPort);
  const { code } = await second.exited;
  assert.equal(code, 2);
  const out = second.output().trim().split('\n');
  const last = out.at(-1) ?? '';
  assert.match(last, new RegExp(`^ferry: --http-port ${httpPort} is in use .*own --http-port`));
  assert.doesNotMatch(second.output(), /\n\s+at /, 'no stack trace');
});

test('relay start - createRelay: stop() while start() still waits for NATS ends both at once', async () => {
  const relay = createRelay({
    databaseUrl: db.url,
    schema: db.schema,
    nats: { servers: `nats://127.0.0.1:${await freePort()}` },
    maintenance: false,
  });
  const starting = relay.start();
  starting.catch(() => {}); // observed below
  await new Promise((r) => setTimeout(r, 1_500)); // past the first refused attempt, inside the wait
  assert.equal(relay.state, 'starting');
  assert.equal(relay.ready(), false);
  const t0 = Date.now();
  await relay.stop();
  const ms = Date.now() - t0;
  assert.ok(ms < 1_000, `stop() took ${ms} ms`);
  await assert.rejects(starting, /stopped before it finished starting/);
  assert.equal(relay.state, 'stopped');
});

test('relay start - an unmigrated schema ends the start with the reason, without a second teardown warning', async () => {
  const p = spawnRelay(['--database-url', db.url, '--schema', 'ferry_never_migrated', '--no-maintenance', '--http-port', '0']);
  procs.push(p);
  const { code } = await p.exited;
  assert.equal(code, 1);
  assert.equal(
    p.output().trim().split('\n').at(-1),
    'ferry: schema "ferry_never_migrated" has no Ferry outbox tables: run ferry migrate --schema ferry_never_migrated first',
  );
  assert.doesNotMatch(p.output(), /more than once|shutdown step failed/);
});
