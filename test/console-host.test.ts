import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { type ConsoleServer, startConsole } from '@ferry/relay';
import { createTestDatabase, freePort, natsUrl, type TestDatabase, waitFor } from '@ferry/testkit';
import { chromium } from 'playwright-core';
import { type RelayProcess, spawnRelay } from './relay-helpers.js';

// DNS rebinding against a loopback console (issue 42, item 2): a page under an attacker's name that
// resolves to 127.0.0.1 reaches the console from the operator's browser as a same-origin page, with
// only the Host header left to tell. The console, and the relay's HTTP port when it serves the
// console (ferry relay --console), answer only a loopback IP literal or localhost with their port.

const CHROMIUM = process.env.FERRY_CHROMIUM ?? '/usr/bin/chromium';
const IBAN = 'DE89370400440532013000';

let db: TestDatabase;
let consoleServer: ConsoleServer;
let relay: RelayProcess | undefined;
let relayPort = 0;
let eventId = '';

before(async () => {
  db = await createTestDatabase({ prefix: 'console_host', lanes: 1 });
  const publisher = createPublisher({ schema: db.schema, source: 'console-host' });
  // A subject no stream binds: the relay (started below) only ever fails it; the payload stays readable.
  const [row] = await withTransaction(db.pool, (tx) =>
    publisher.publishMany(tx, [{ subject: `nostream_${db.schema}.payments`, key: 'acct-1', type: 'Payment', data: { iban: IBAN } }]),
  );
  eventId = row?.id as string;
  consoleServer = await startConsole({
    pool: db.pool,
    schema: db.schema,
    bossSchema: `${db.schema}_boss`,
    host: '127.0.0.1',
    port: 0,
    readOnly: false,
    refreshMs: 1000,
  });
  relayPort = await freePort();
  relay = spawnRelay(
    ['--console', '--http-port', String(relayPort), '--database-url', db.url, '--schema', db.schema, '--nats-url', natsUrl()],
    { FERRY_LOG_LEVEL: 'warn' },
  );
  await waitFor(async () => (await get(relayPort, '/healthz', `127.0.0.1:${relayPort}`).catch(() => undefined))?.status === 200, {
    what: `ferry relay --console to listen (${relay.output().slice(-500)})`,
    timeoutMs: 30_000,
    intervalMs: 200,
  });
});

after(async () => {
  if (relay) {
    relay.proc.kill('SIGTERM');
    await relay.exited;
  }
  await consoleServer?.close();
  await db?.close();
});

/** A GET to 127.0.0.1:port with the Host header given (a browser under a rebound name sends its own name). */
function get(port: number, path: string, host: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    request({ host: '127.0.0.1', port, path, headers: { host } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
    })
      .on('error', reject)
      .end();
  });
}

/** An HTTP/1.0 request with no Host header at all (HTTP/1.1 without one is node's own 400). */
function getWithoutHost(port: number, path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.end(`GET ${path} HTTP/1.0\r\n\r\n`));
    let out = '';
    socket.on('data', (c: Buffer) => {
      out += c.toString('utf8');
    });
    socket.on('end', () => resolve(out));
    socket.on('error', reject);
  });
}

/** Host names (before `:port`) a loopback console must refuse: rebinding names and non-canonical spellings. */
const REFUSED_NAMES = [
  '127.0.0.1.rebind.evil.example',
  '127.evil.example',
  'localhost.evil.example',
  'localhost.',
  '127.0.0.1.',
  '0x7f.1',
  '0x7f.0.0.1',
  '2130706433',
  '127.1',
  '0177.0.0.1',
  '[::ffff:127.0.0.1]',
];

for (const [what, port] of [
  ['ferry console', () => Number(new URL(consoleServer.url).port)],
  ['ferry relay --console', () => relayPort],
] as const) {
  test(`${what} - an event page under a rebinding name, another spelling of 127.0.0.1 or a wrong port is 421 and shows nothing`, async () => {
    const p = port();
    const path = `/event?id=${eventId}`;
    const ok = await get(p, path, `127.0.0.1:${p}`);
    assert.equal(ok.status, 200, ok.body.slice(0, 300));
    assert.ok(ok.body.includes(IBAN), 'the operator reads the payload');
    for (const host of ['localhost', 'LOCALHOST', '127.0.0.2', '[::1]'])
      assert.equal((await get(p, path, `${host}:${p}`)).status, 200, `${host} is this console's name`);
    for (const name of REFUSED_NAMES) {
      const res = await get(p, path, `${name}:${p}`);
      assert.equal(res.status, 421, `Host ${name}:${p}`);
      assert.ok(!res.body.includes(IBAN), `no payload under Host ${name}`);
      assert.match(res.body, /open http:\/\/127\.0\.0\.1:\d+\//, 'the refusal says what to open');
    }
    for (const host of [`127.0.0.1:${p + 1}`, '127.0.0.1', `localhost:${p}0`]) {
      const res = await get(p, path, host);
      assert.equal(res.status, 421, `Host ${host} (port ${p})`);
      assert.ok(!res.body.includes(IBAN));
    }
    const noHost = await getWithoutHost(p, path);
    assert.match(noHost, /^HTTP\/1\.1 421 /, noHost.slice(0, 200));
    assert.match(noHost, /no Host header/);
  });
}

test('ferry relay --console - its /metrics and /healthz answer only the same names (one origin, one rule)', async () => {
  for (const path of ['/metrics', '/healthz', '/readyz', '/nowhere']) {
    const res = await get(relayPort, path, `127.0.0.1.rebind.evil.example:${relayPort}`);
    assert.equal(res.status, 421, path);
    assert.match(res.body, /does not name this server/);
  }
  assert.equal((await get(relayPort, '/metrics', `localhost:${relayPort}`)).status, 200);
});

test('ferry console in Chromium - a page loaded under a name that resolves to 127.0.0.1 gets 421, not the event', async () => {
  const userDataDir = mkdtempSync(join(tmpdir(), 'ferry-console-host-chromium-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    // The attacker's DNS, after the rebind: every *.evil.example name is 127.0.0.1.
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--host-resolver-rules=MAP *.evil.example 127.0.0.1'],
  });
  try {
    const page = await context.newPage();
    const p = Number(new URL(consoleServer.url).port);
    for (const name of ['127.0.0.1.rebind.evil.example', '127.evil.example', 'localhost.evil.example']) {
      const res = await page.goto(`http://${name}:${p}/event?id=${eventId}`);
      assert.equal(res?.status(), 421, name);
      assert.ok(!((await page.content()) ?? '').includes(IBAN), `no payload under ${name}`);
    }
    // The URL parser rewrites other spellings of 127.0.0.1 before they are sent: they reach the console as itself.
    const hex = await page.goto(`http://0x7f.1:${p}/event?id=${eventId}`);
    assert.equal(hex?.status(), 200);
    assert.equal(new URL(page.url()).host, `127.0.0.1:${p}`);
    await page.close();
  } finally {
    await context.close();
    rmSync(userDataDir, { recursive: true, force: true });
  }
});
