// NATS credentials for the CLI and the inbox (the relay's TLS and nkey cases are
// in relay-security.test.ts): user/password, token, nkey seed, creds file (an
// operator-mode server with JWTs this test signs) and TLS with a CA this test
// makes. Right credentials work; wrong ones fail fast, with one line saying
// why, a non-zero exit, and never the secret.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { encodeEvent, quoteIdentifier, withTransaction } from '@ferry/core';
import { createInbox } from '@ferry/inbox';
import { createPublisher } from '@ferry/publisher';
import { createTestDatabase, NatsServer, type TestDatabase, uniqueName, waitFor } from '@ferry/testkit';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { type ConnectionOptions, connect, credsAuthenticator, headers, nkeys } from '@nats-io/transport-node';
import { markPublished } from './delivery-state.js';
import { FERRY_BIN, spawnRelay } from './relay-helpers.js';

type KeyPair = ReturnType<typeof nkeys.createUser>;

const b64u = (b: Uint8Array | string) => Buffer.from(b).toString('base64url');

/** The seed with one base32 character changed: still SU…, the right length, a failing CRC16. */
function badChecksum(seed: string): string {
  const i = 20;
  return `${seed.slice(0, i)}${seed[i] === 'A' ? 'B' : 'A'}${seed.slice(i + 1)}`;
}

/** A NATS JWT (v2 claims) signed with an nkey: what nsc would write. */
function signJwt(signer: KeyPair, subject: string, name: string, nats: Record<string, unknown>): string {
  const header = b64u(JSON.stringify({ typ: 'JWT', alg: 'ed25519-nkey' }));
  const claims = {
    jti: randomUUID().replaceAll('-', '').toUpperCase(),
    iat: Math.floor(Date.now() / 1000),
    iss: signer.getPublicKey(),
    name,
    sub: subject,
    nats: { ...nats, version: 2 },
  };
  const body = b64u(JSON.stringify(claims));
  return `${header}.${body}.${b64u(signer.sign(new TextEncoder().encode(`${header}.${body}`)))}`;
}

/** An operator, a system account, an account with JetStream, a user: the server config and the user's creds file text. */
function operatorSetup(): { config: string; creds: string; seed: string } {
  const operator = nkeys.createOperator();
  const system = nkeys.createAccount();
  const account = nkeys.createAccount();
  const user = nkeys.createUser();
  const limits = { subs: -1, data: -1, payload: -1, imports: -1, exports: -1, wildcards: true, conn: -1, leaf: -1 };
  const opJwt = signJwt(operator, operator.getPublicKey(), 'ferry-op', { type: 'operator' });
  const sysJwt = signJwt(operator, system.getPublicKey(), 'SYS', { type: 'account', limits });
  const accJwt = signJwt(operator, account.getPublicKey(), 'APP', {
    type: 'account',
    limits: { ...limits, mem_storage: -1, disk_storage: -1, streams: -1, consumer: -1 },
  });
  const userJwt = signJwt(account, user.getPublicKey(), 'ferry', { type: 'user', pub: {}, sub: {}, subs: -1, data: -1, payload: -1 });
  const seed = new TextDecoder().decode(user.getSeed());
  return {
    config: [
      `operator: "${opJwt}"`,
      `system_account: ${system.getPublicKey()}`,
      'resolver: MEMORY',
      `resolver_preload: { ${account.getPublicKey()}: "${accJwt}", ${system.getPublicKey()}: "${sysJwt}" }`,
    ].join('\n'),
    creds: `-----BEGIN NATS USER JWT-----\n${userJwt}\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\n${seed}\n------END USER NKEY SEED------\n`,
    seed,
  };
}

function makeCa(dir: string): { ca: string; cert: string; key: string } {
  const ssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  ssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '1', '-subj', '/CN=ferry-sec-ca');
  writeFileSync(join(dir, 'server.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n');
  ssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=ferry-sec-server');
  ssl(
    'x509',
    '-req',
    '-in',
    'server.csr',
    '-CA',
    'ca.pem',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-out',
    'server.pem',
    '-days',
    '1',
    '-extfile',
    'server.ext',
  );
  return { ca: join(dir, 'ca.pem'), cert: join(dir, 'server.pem'), key: join(dir, 'server.key') };
}

interface Run {
  code: number | null;
  out: string;
  ms: number;
}

/** Runs bin/ferry.js with a hard time bound (a crash loop or a hang would hit it). */
function ferry(args: string[], env: Record<string, string> = {}, timeoutMs = 20_000): Promise<Run> {
  const started = Date.now();
  const proc = spawn(process.execPath, [FERRY_BIN, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout.on('data', (b: Buffer) => {
    out += b.toString();
  });
  proc.stderr.on('data', (b: Buffer) => {
    out += b.toString();
  });
  const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
  return new Promise((resolve) =>
    proc.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, out, ms: Date.now() - started });
    }),
  );
}

// A / in each: nats.js v3 ignored a URL's userinfo, and the redactor's pattern stopped at the /.
const SECRETS = { password: 'pw/Secret-7f3a', token: 'tok/Secret-91c2' };
/** `nats://userinfo@127.0.0.1:port` of a test server. */
const withUserinfo = (url: string, userinfo: string) => url.replace('nats://', `nats://${userinfo}@`);

describe('NATS credentials: every auth mode works for the CLI and the inbox; wrong ones fail fast', () => {
  let db: TestDatabase;
  let dir: string;
  let users: NatsServer;
  let tokenServer: NatsServer;
  let operator: NatsServer;
  let tls: NatsServer;
  let op: ReturnType<typeof operatorSetup>;
  let certs: ReturnType<typeof makeCa>;
  const nkeyUser = nkeys.createUser();
  const nkeySeed = new TextDecoder().decode(nkeyUser.getSeed());

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ferry-sec-nats-'));
    certs = makeCa(dir);
    op = operatorSetup();
    writeFileSync(join(dir, 'user.creds'), op.creds, { mode: 0o600 });
    db = await createTestDatabase({ prefix: 'sec_nats', migrate: ['outbox', 'inbox'], lanes: 2 });
    // One published (retained) event, so ferry replay has something to send and must connect.
    await withTransaction(db.pool, (tx) =>
      createPublisher({ schema: db.schema, source: 'sec' }).publish(tx, { subject: 'secnats.x', key: 'k', type: 'T', data: {} }),
    );
    assert.equal(await markPublished(db.pool, db.schema, 'true', []), 1);
    // One after the other: parallel starts pick free ports concurrently and can collide.
    users = await NatsServer.start({
      config: `authorization { users: [ { user: "ferry", password: "${SECRETS.password}" }, { nkey: "${nkeyUser.getPublicKey()}" } ] }`,
    });
    tokenServer = await NatsServer.start({ config: `authorization { token: "${SECRETS.token}" }` });
    operator = await NatsServer.start({ config: op.config });
    tls = await NatsServer.start({ config: `tls { cert_file: "${certs.cert}", key_file: "${certs.key}" }` });
  });

  after(async () => {
    await Promise.all([users?.stop(), tokenServer?.stop(), operator?.stop(), tls?.stop()]);
    await db?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const base = () => ['--database-url', db.url, '--schema', db.schema];

  /** [mode, server url, flags, env]: each a way `ferry` authenticates. */
  const modes = (): Array<[string, string, string[], Record<string, string>]> => [
    ['user/password flags', users.url, ['--nats-user', 'ferry', '--nats-password', SECRETS.password], {}],
    ['user/password env', users.url, [], { FERRY_NATS_USER: 'ferry', FERRY_NATS_PASSWORD: SECRETS.password }],
    ['token', tokenServer.url, ['--nats-token', SECRETS.token], {}],
    ['nkey seed', users.url, [], { FERRY_NATS_NKEY_SEED: nkeySeed }],
    ['creds file', operator.url, ['--nats-creds', join(dir, 'user.creds')], {}],
    ['TLS with a private CA', tls.url.replace('nats://', 'tls://'), ['--nats-tls-ca', certs.ca], {}],
    ['user:password in the URL, a / unencoded', withUserinfo(users.url, `ferry:${SECRETS.password}`), [], {}],
    ['user:password in the URL, percent-encoded', withUserinfo(users.url, `ferry:${encodeURIComponent(SECRETS.password)}`), [], {}],
    ['token in the URL, a / unencoded', withUserinfo(tokenServer.url, SECRETS.token), [], {}],
  ];

  test('security - ferry doctor reaches NATS and JetStream with user/password, token, nkey seed, creds file and TLS', async () => {
    for (const [mode, url, flags, env] of modes()) {
      const r = await ferry(['doctor', ...base(), '--nats-url', url, ...flags], env);
      assert.match(r.out, /ok\s+nats: reachable/, `${mode}: ${r.out.slice(-600)}`);
      for (const secret of [SECRETS.password, SECRETS.token, nkeySeed, op.seed])
        assert.ok(!r.out.includes(secret), `${mode}: secret in output`);
    }
  });

  test('security - ferry replay publishes to JetStream with user/password, token, nkey seed, creds file and TLS', async () => {
    const connections: Record<string, ConnectionOptions> = {
      [users.url]: { servers: users.url, user: 'ferry', pass: SECRETS.password },
      [tokenServer.url]: { servers: tokenServer.url, token: SECRETS.token },
      [operator.url]: { servers: operator.url, authenticator: credsAuthenticator(new TextEncoder().encode(op.creds)) },
      [tls.url]: { servers: tls.url, tls: { caFile: certs.ca } },
    };
    for (const options of Object.values(connections)) {
      const nc = await connect(options);
      try {
        const jsm = await jetstreamManager(nc);
        await jsm.streams.add({ name: 'SECNATS', subjects: ['secnats.>'] }).catch(() => {});
      } finally {
        await nc.close();
      }
    }
    for (const [mode, url, flags, env] of modes()) {
      const r = await ferry(
        ['replay', ...base(), '--nats-url', url, ...flags, '--from-seq', '1', '--json', '--progress', 'none', '--yes'],
        env,
      );
      assert.equal(r.code, 0, `${mode}: ${r.out.slice(-600)}`);
      const report = JSON.parse(r.out.trim().split('\n').at(-1) ?? '{}') as { replayed?: number };
      assert.equal(report.replayed, 1, `${mode}: ${r.out.slice(-300)}`);
      for (const secret of [SECRETS.password, SECRETS.token, nkeySeed, op.seed])
        assert.ok(!r.out.includes(secret), `${mode}: secret in output`);
    }
  });

  test('security - wrong NATS credentials make relay, replay, verify and doctor exit non-zero fast with one line naming the reason', async () => {
    const wrong: Array<[string, string, string[], Record<string, string>]> = [
      ['wrong password', users.url, ['--nats-user', 'ferry', '--nats-password', 'WRONG-pw-Secret'], {}],
      ['wrong token', tokenServer.url, ['--nats-token', 'WRONG-tok-Secret'], {}],
      ['unknown nkey', users.url, [], { FERRY_NATS_NKEY_SEED: new TextDecoder().decode(nkeys.createUser().getSeed()) }],
      ['no credentials', operator.url, [], {}],
      ['untrusted server certificate', tls.url.replace('nats://', 'tls://'), [], {}],
      ['wrong password in the URL', withUserinfo(users.url, 'ferry:WRONG-pw-Secret'), [], {}],
      ['an unparseable creds file', operator.url, ['--nats-creds', join(dir, 'garbled.creds')], {}],
      ['a creds file whose seed fails its checksum', operator.url, ['--nats-creds', join(dir, 'bad-seed.creds')], {}],
      ['an nkey seed that fails its checksum', users.url, [], { FERRY_NATS_NKEY_SEED: badChecksum(nkeySeed) }],
      ['URL credentials beside --nats-user', withUserinfo(users.url, `ferry:${SECRETS.password}`), ['--nats-user', 'ferry'], {}],
    ];
    writeFileSync(join(dir, 'garbled.creds'), op.creds.replaceAll('-----', '==='), { mode: 0o600 });
    writeFileSync(join(dir, 'bad-seed.creds'), op.creds.replace(op.seed, badChecksum(op.seed)), { mode: 0o600 });
    const commands: Array<[string, string[]]> = [
      ['relay', ['relay', ...base(), '--http-port', '0', '--no-maintenance']],
      ['replay', ['replay', ...base(), '--from-seq', '1', '--yes']],
      ['verify', ['verify', ...base(), '--timeout', '2s']],
      ['doctor', ['doctor', ...base()]],
    ];
    for (const [mode, url, flags, env] of wrong) {
      const runs = await Promise.all(commands.map(([, args]) => ferry([...args, '--nats-url', url, ...flags], env)));
      for (const [i, r] of runs.entries()) {
        const what = `${commands[i]?.[0]} with ${mode}`;
        assert.notEqual(r.code, 0, `${what}: exit code`);
        assert.notEqual(r.code, null, `${what}: ended by the time bound (a hang or a retry loop)`);
        assert.ok(r.ms < 15_000, `${what}: took ${r.ms} ms`);
        const reasons = r.out
          .split('\n')
          .filter((l) =>
            /authori[sz]ation|authentication|certificate|self[- ]signed|unable to verify|TLS|permissions|--nats-(creds|nkey-seed|url)/i.test(
              l,
            ),
          );
        assert.ok(reasons.length >= 1, `${what}: a line naming the reason: ${r.out.slice(-800)}`);
        // A credential the configuration makes unusable is known before any connection: no waiting at all.
        // (Before: the relay logged "waiting for NATS" and retried until stopped.) No time bound of its own:
        // four CLIs start at once on a shared machine (load 20+ seen). The proof is that the command ended
        // with bad usage before the relay's starting line, a wait or a connection attempt.
        if (/creds|seed|beside/.test(mode)) {
          // doctor reports it as one problem (exit 1); the others: bad usage.
          assert.equal(r.code, commands[i]?.[0] === 'doctor' ? 1 : 2, `${what}: exit code`);
          assert.doesNotMatch(r.out, /nats-waiting|ferry relay starting|not reachable/, what);
        }
        for (const secret of ['WRONG-pw-Secret', 'WRONG-tok-Secret', SECRETS.password, SECRETS.token, op.seed, nkeySeed]) {
          assert.ok(!r.out.includes(secret), `${what}: secret in output`);
        }
      }
    }
  });

  test('security - credentials in FERRY_NATS_URL, a / in each, take the relay to running; its log, doctor --json and stderr never show them', async () => {
    const cases: Array<[string, string]> = [
      ['token', withUserinfo(tokenServer.url, SECRETS.token)],
      ['user:password', withUserinfo(users.url, `ferry:${SECRETS.password}`)],
    ];
    for (const [mode, url] of cases) {
      const relay = spawnRelay([...base(), '--http-port', '0', '--no-maintenance'], { FERRY_NATS_URL: url });
      try {
        await waitFor(() => relay.output().includes('"event":"started"') || relay.proc.exitCode !== null, {
          timeoutMs: 15_000,
          what: `the relay running with the ${mode} of FERRY_NATS_URL`,
        });
      } finally {
        relay.proc.kill('SIGTERM');
      }
      assert.equal((await relay.exited).code, 0, relay.output().slice(-800));
      const starting =
        relay
          .output()
          .split('\n')
          .find((l) => l.includes('ferry relay starting')) ?? '';
      const port = new URL(url.replace(/\/\/.*@/, '//')).port;
      assert.match(starting, new RegExp(`"nats":\\["nats://(\\*\\*\\*|ferry:\\*\\*\\*)@127\\.0\\.0\\.1:${port}"\\]`), starting);
      const doctor = await ferry(['doctor', ...base(), '--json'], { FERRY_NATS_URL: url });
      const report = JSON.parse(doctor.out.trim().split('\n').at(-1) ?? '{}') as { findings?: Array<{ check: string; status: string }> };
      assert.equal(report.findings?.find((f) => f.check === 'nats')?.status, 'ok', doctor.out.slice(-600));
      for (const out of [relay.output(), doctor.out]) {
        for (const secret of [SECRETS.password, SECRETS.token, encodeURIComponent(SECRETS.token), 'Secret-']) {
          assert.ok(!out.includes(secret), `${mode}: ${secret} in ${out.slice(0, 400)}`);
        }
      }
    }
  });

  test('security - an inbox consumes over a creds-file connection and over TLS with a private CA', async () => {
    const connections: Array<[string, ConnectionOptions]> = [
      ['creds', { servers: operator.url, authenticator: credsAuthenticator(new TextEncoder().encode(op.creds)) }],
      ['tls', { servers: tls.url, tls: { caFile: certs.ca } }],
    ];
    for (const [mode, options] of connections) {
      const nc = await connect(options);
      const stream = uniqueName('SECIN').toUpperCase();
      const subject = `${stream.toLowerCase()}.set`;
      const applied: string[] = [];
      const inbox = createInbox<{ Set: unknown }>({
        pool: db.pool,
        nc,
        stream,
        consumer: uniqueName('c'),
        schema: db.schema,
        bossSchema: `${db.schema}_boss`,
        handlers: {
          Set: async (event) => {
            applied.push(event.key);
          },
        },
      });
      try {
        await (await jetstreamManager(nc)).streams.add({ name: stream, subjects: [`${stream.toLowerCase()}.>`] });
        const js = jetstream(nc);
        for (let i = 1; i <= 5; i++) {
          const e = encodeEvent({
            id: randomUUID(),
            key: `k${i}`,
            version: 1n,
            subject,
            type: 'Set',
            source: 'sec',
            time: new Date(),
            contentType: 'application/json',
            data: Buffer.from('{}'),
            headers: {},
          });
          const h = headers();
          for (const [n, v] of e.headers) h.set(n, v);
          await js.publish(subject, e.body, { headers: h });
        }
        await inbox.start();
        await waitFor(() => applied.length === 5, { timeoutMs: 15_000, what: `the inbox applying 5 events over ${mode}` });
      } finally {
        await inbox.stop();
        await nc.close();
      }
    }
    await db.pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(`${db.schema}_boss`)} CASCADE`);
  });
});
