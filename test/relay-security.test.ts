import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { createTestDatabase, NatsServer, type TestDatabase, waitFor } from '@ferry/testkit';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, nkeyAuthenticator, nkeys } from '@nats-io/transport-node';
import { countPending, publishEvents, type RelayProcess, readStream, spawnRelay } from './relay-helpers.js';

/** A throw-away CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl. */
function makeCertificates(dir: string): Record<'ca' | 'serverCert' | 'serverKey' | 'clientCert' | 'clientKey', string> {
  const f = (name: string) => join(dir, name);
  const ssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  ssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '1', '-subj', '/CN=ferry-test-ca');
  writeFileSync(f('server.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n');
  writeFileSync(f('client.ext'), 'extendedKeyUsage=clientAuth\n');
  for (const who of ['server', 'client']) {
    ssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${who}.key`, '-out', `${who}.csr`, '-subj', `/CN=ferry-${who}`);
    ssl(
      'x509',
      '-req',
      '-in',
      `${who}.csr`,
      '-CA',
      'ca.pem',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-out',
      `${who}.pem`,
      '-days',
      '1',
      '-extfile',
      `${who}.ext`,
    );
  }
  return {
    ca: f('ca.pem'),
    serverCert: f('server.pem'),
    serverKey: f('server.key'),
    clientCert: f('client.pem'),
    clientKey: f('client.key'),
  };
}

describe('relay NATS security: mutual TLS and nkeys', () => {
  let db: TestDatabase;
  let nats: NatsServer;
  let dir: string;
  let certs: ReturnType<typeof makeCertificates>;
  let relay: RelayProcess | undefined;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ferry-tls-'));
    certs = makeCertificates(dir);
    nats = await NatsServer.start({
      config: `tls { cert_file: "${certs.serverCert}", key_file: "${certs.serverKey}", ca_file: "${certs.ca}", verify: true }`,
    });
    db = await createTestDatabase({ prefix: 'relay_tls', lanes: 4 });
  });

  after(async () => {
    if (relay && relay.proc.exitCode === null && relay.proc.signalCode === null) relay.proc.kill('SIGKILL');
    await nats?.stop();
    await db?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('relay - --nats-tls-ca, --nats-tls-cert and --nats-tls-key reach a server that requires client certificates', async () => {
    const nc = await connect({ servers: nats.url, tls: { caFile: certs.ca, certFile: certs.clientCert, keyFile: certs.clientKey } });
    try {
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: 'TLS', subjects: ['relaytls.>'] });
      const ids = await publishEvents(db.pool, db.schema, 'relaytls', 100, { keys: 10 });
      relay = spawnRelay([
        '--database-url',
        db.url,
        '--schema',
        db.schema,
        '--nats-url',
        nats.url,
        '--nats-tls-ca',
        certs.ca,
        '--nats-tls-cert',
        certs.clientCert,
        '--nats-tls-key',
        certs.clientKey,
        '--no-maintenance',
        '--http-port',
        '0',
      ]);
      await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 20_000, what: 'a drain over TLS' });
      assert.deepEqual(new Set((await readStream(nc, 'TLS')).map((e) => e.id)), new Set(ids));
      relay.proc.kill('SIGTERM');
      assert.equal((await relay.exited).code, 0, relay.output().slice(-1500));
    } finally {
      await nc.close();
    }
  });

  test('relay - an unreadable TLS file exits 2 naming the option', async () => {
    const p = spawnRelay(['--database-url', db.url, '--nats-url', nats.url, '--nats-tls-ca', join(dir, 'missing.pem'), '--http-port', '0']);
    const exit = await p.exited;
    assert.equal(exit.code, 2);
    assert.match(p.output(), /--nats-tls-ca ".*missing\.pem" cannot be read \(ENOENT\)/);
  });

  test('relay - --nats-nkey-seed authenticates with an nkey, and the seed never appears in the log', async () => {
    const user = nkeys.createUser();
    const seed = new TextDecoder().decode(user.getSeed());
    const server = await NatsServer.start({ config: `authorization { users: [ { nkey: "${user.getPublicKey()}" } ] }` });
    const nc = await connect({ servers: server.url, authenticator: nkeyAuthenticator(user.getSeed()) });
    try {
      await (await jetstreamManager(nc)).streams.add({ name: 'NKEY', subjects: ['relaynkey.>'] });
      const ids = await publishEvents(db.pool, db.schema, 'relaynkey', 50, { keys: 5 });
      relay = spawnRelay(
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
        {
          FERRY_NATS_NKEY_SEED: seed,
        },
      );
      await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 20_000, what: 'a drain with nkey auth' });
      assert.deepEqual(new Set((await readStream(nc, 'NKEY')).map((e) => e.id)), new Set(ids));
      relay.proc.kill('SIGTERM');
      assert.equal((await relay.exited).code, 0, relay.output().slice(-1500));
      assert.ok(!relay.output().includes(seed), 'no seed in the log');
    } finally {
      await nc.close();
      await server.stop();
    }
  });
});
