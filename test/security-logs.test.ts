// Secrets and payloads in logs: every process this test starts (the relay, each
// CLI command, an inbox with a pino logger) gets secrets in its configuration
// (database password, NATS password, token, nkey seed, a password inside a NATS
// URL) and events carrying a payload marker; all output is grepped.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { encodeEvent, withTransaction } from '@ferry/core';
import { createInbox } from '@ferry/inbox';
import { createPublisher } from '@ferry/publisher';
import { createTestDatabase, freePort, NatsServer, type TestDatabase, waitFor } from '@ferry/testkit';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, headers, type NatsConnection, nkeys } from '@nats-io/transport-node';
import pg from 'pg';
import { pino } from 'pino';
import { FERRY_BIN } from './relay-helpers.js';

const MARKER = 'PAYLOAD-MARKER-5e1d';
const DB_PASSWORD = 'db-Secret-aa41';
const NATS_PASSWORD = 'nats-Secret-b7e2';
const URL_PASSWORD = 'url-Secret-c3d9';
const TOKEN = 'tok-Secret-d0f4';
const URL_TOKEN = 'tokS3cretTok-e5a1'; // nats://TOKEN@host
const MALFORMED_PASSWORD = 'S3cretPw-f6b2'; // inside a URL no parser accepts
const NATSS_PASSWORD = 'NatsPw99-a7c3'; // inside a natss:// URL (not a scheme Ferry accepts)
const QUERY_PASSWORD = 'QueryPw-Secret-1b7d'; // postgres://host/db?password=… (node-postgres reads it)
const SHAPE_PASSWORD = 'ShapePw-Secret-2c8e'; // beside a reserved character no URL parser accepts unencoded
const SLASH_TOKEN = 'slash/Tok-Secret-3d9f'; // nats://to/ken@host
const nkeyUser = nkeys.createUser();
const SEED = new TextDecoder().decode(nkeyUser.getSeed());
const CREDS_SEED = new TextDecoder().decode(nkeys.createUser().getSeed());
const SECRETS = [
  DB_PASSWORD,
  NATS_PASSWORD,
  URL_PASSWORD,
  TOKEN,
  SEED,
  URL_TOKEN,
  MALFORMED_PASSWORD,
  NATSS_PASSWORD,
  CREDS_SEED,
  QUERY_PASSWORD,
  SHAPE_PASSWORD,
  SLASH_TOKEN,
  'slash%2FTok', // the percent-encoded form of SLASH_TOKEN
];

function assertNoSecret(output: string, what: string): void {
  for (const secret of SECRETS) {
    assert.ok(
      !output.includes(secret),
      `${what}: ${secret.slice(0, 8)}… appears in the output:\n${output
        .split('\n')
        .filter((l) => l.includes(secret))
        .join('\n')
        .slice(0, 1500)}`,
    );
  }
}

/** pino JSON lines that mention the payload marker must be debug (20) or below. */
function assertPayloadOnlyAtDebug(output: string, what: string): void {
  for (const line of output.split('\n')) {
    if (!line.includes(MARKER)) continue;
    let level = Number.POSITIVE_INFINITY;
    try {
      level = (JSON.parse(line) as { level?: number }).level ?? level;
    } catch {
      // not a JSON log line: plain output must not carry payloads at all
    }
    assert.ok(level <= 20, `${what}: a payload logged above debug: ${line.slice(0, 300)}`);
  }
}

function ferry(args: string[], env: Record<string, string> = {}, timeoutMs = 20_000): Promise<{ code: number | null; out: string }> {
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
      resolve({ code, out });
    }),
  );
}

describe('secrets are redacted and payloads stay at debug in every process', () => {
  let db: TestDatabase;
  let server: NatsServer;
  let nc: NatsConnection;
  let secretUrl: string;
  const stream = 'SECLOGS';

  before(async () => {
    db = await createTestDatabase({ prefix: 'sec_logs', migrate: ['outbox', 'inbox'], lanes: 2 });
    const u = new URL(db.url);
    u.password = DB_PASSWORD; // the local server trusts, so the password only travels
    secretUrl = u.toString();
    server = await NatsServer.start({
      config: `authorization { users: [ { user: "ferry", password: "${NATS_PASSWORD}" }, { user: "urluser", password: "${URL_PASSWORD}" }, { nkey: "${nkeyUser.getPublicKey()}" } ] }`,
    });
    nc = await connect({ servers: server.url, user: 'ferry', pass: NATS_PASSWORD });
    await (await jetstreamManager(nc)).streams.add({ name: stream, subjects: ['seclogs.>'] });
    const publisher = createPublisher({ schema: db.schema, source: 'sec-logs' });
    await withTransaction(db.pool, async (tx) => {
      for (let i = 0; i < 20; i++) {
        await publisher.publish(tx, { subject: 'seclogs.orders', key: `k${i % 3}`, type: 'Set', data: { marker: MARKER, i } });
      }
      // No stream covers this subject: the relay fails it and logs the failure.
      await publisher.publish(tx, { subject: 'nostream.orders', key: 'lost', type: 'Set', data: { marker: MARKER } });
    });
  });

  after(async () => {
    await nc?.close();
    await server?.stop();
    await db?.close();
  });

  test('security - the relay at debug level logs no secret, and payloads only at debug', async () => {
    const proc = spawn(
      process.execPath,
      [
        FERRY_BIN,
        'relay',
        '--database-url',
        secretUrl,
        '--schema',
        db.schema,
        // Credentials in the URL (nats.js ignored them until natsConnectOptions split them off), the same in both entries.
        '--nats-url',
        `nats://urluser:${URL_PASSWORD}@127.0.0.1:${server.port},nats://urluser:${URL_PASSWORD}@localhost:${server.port}`,
        '--http-port',
        '0',
        '--log-level',
        'debug',
        '--max-attempts',
        '2',
        '--backoff-base-ms',
        '10',
        '--backoff-max-ms',
        '20',
        '--poll-interval-ms',
        '50',
        '--no-maintenance',
      ],
      { env: { ...process.env }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    proc.stdout.on('data', (b: Buffer) => {
      out += b.toString();
    });
    proc.stderr.on('data', (b: Buffer) => {
      out += b.toString();
    });
    const exited = new Promise<number | null>((resolve) => proc.once('close', resolve));
    try {
      await waitFor(
        async () => {
          const { rows } = await db.pool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM "${db.schema}".outbox_events WHERE published_at IS NULL AND dead_at IS NULL`,
          );
          return rows[0]?.n === 0;
        },
        {
          timeoutMs: 20_000,
          what: 'the drain (and the dead row)',
        },
      );
    } finally {
      proc.kill('SIGTERM');
    }
    assert.equal(await exited, 0, out.slice(-1500));
    assert.ok(out.split('\n').length > 3, 'the relay logged');
    assertNoSecret(out, 'ferry relay');
    assertPayloadOnlyAtDebug(out, 'ferry relay');
  });

  test('security - every CLI command keeps secrets out of its output, also when NATS refuses or is down', async () => {
    const closedPort = await freePort();
    const natsEnv = { FERRY_NATS_USER: 'ferry', FERRY_NATS_PASSWORD: NATS_PASSWORD };
    const base = ['--database-url', secretUrl, '--schema', db.schema];
    const dir = mkdtempSync(join(tmpdir(), 'ferry-creds-'));
    const credsFile = join(dir, 'user.creds');
    writeFileSync(
      credsFile,
      `-----BEGIN NATS USER JWT-----\neyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.eyJqdGkiOiJ0ZXN0In0.c2lnbmF0dXJl\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\n${CREDS_SEED}\n------END USER NKEY SEED------\n`,
    );
    const malformedDbUrl = `postgres://u:${MALFORMED_PASSWORD}@127.0.0.1:99999/x`;
    const natssUrl = `natss://bob:${NATSS_PASSWORD}@127.0.0.1:${server.port}`;
    const query = new URL(db.url);
    query.searchParams.set('password', QUERY_PASSWORD);
    const queryUrl = query.toString();
    const slashTokenUrl = `nats://${SLASH_TOKEN}@127.0.0.1:${server.port}`;
    // Each shape once printed the URL whole in commander's "argument '…' is invalid" line.
    const shapes: Array<[string, string]> = [
      ['a / # ? , space and quote in the password', `postgres://u:p/a#s?s,x y'z ${SHAPE_PASSWORD}@127.0.0.1:5432/test`],
      ['a / after digits in the password', `postgres://u:123/${SHAPE_PASSWORD}@127.0.0.1:5432/test`],
      ['a bad port', `postgres://u:${SHAPE_PASSWORD}@127.0.0.1:5x/test`],
      ['?password= and a bad port', `postgres://127.0.0.1:99999/test?password=${SHAPE_PASSWORD}`],
    ];
    // Each run names the line it must print: a command that exits before it uses its secret proves nothing.
    const runs: Array<[string, string[], Record<string, string>, RegExp]> = [
      ['migrate', ['migrate', ...base], {}, /outbox schema ".+" (is current|applied)|applied .* to outbox schema/],
      ['migrate --inbox', ['migrate', ...base, '--inbox'], {}, /inbox schema ".+" (is current|applied)|applied .* to inbox schema/],
      ['status', ['status', ...base], {}, /pending/i],
      ['status --json', ['status', ...base, '--json'], {}, /"pending"/],
      ['dlq list', ['dlq', 'list', ...base, '--json'], {}, /^\[/m],
      ['inbox parked list', ['inbox', 'parked', 'list', ...base, '--boss-schema', `${db.schema}_nope`], {}, /pg-boss|parked|boss/i],
      ['doctor', ['doctor', ...base, '--nats-url', server.url, '--stream', stream], natsEnv, /stream/i],
      ['doctor --json', ['doctor', ...base, '--nats-url', server.url, '--json'], natsEnv, /"check"/],
      [
        'replay',
        ['replay', ...base, '--nats-url', server.url, '--from-seq', '1', '--json', '--yes'],
        natsEnv,
        /"(republished|events|count|published)"|replay/i,
      ],
      [
        'verify',
        ['verify', ...base, '--nats-url', server.url, '--subject', 'seclogs.canary', '--timeout', '1s'],
        natsEnv,
        /verify|canary/i,
      ],
      ['doctor, token', ['doctor', ...base, '--nats-url', server.url], { FERRY_NATS_TOKEN: TOKEN }, /NATS/],
      ['doctor, nkey', ['doctor', ...base, '--nats-url', server.url], { FERRY_NATS_NKEY_SEED: SEED }, /NATS|stream/],
      [
        'doctor, password in the NATS URL',
        ['doctor', ...base, '--nats-url', `nats://urluser:${URL_PASSWORD}@127.0.0.1:${server.port}`],
        {},
        /NATS|stream/,
      ],
      [
        'doctor, token in the NATS URL',
        ['doctor', ...base, '--nats-url', `nats://${URL_TOKEN}@127.0.0.1:${server.port}`],
        {},
        /nats:\/\/\*\*\*@127\.0\.0\.1|NATS/,
      ],
      [
        'replay, NATS down, password in its URL',
        ['replay', ...base, '--nats-url', `nats://urluser:${URL_PASSWORD}@127.0.0.1:${closedPort}`, '--from-seq', '1', '--yes'],
        {},
        /not reachable/,
      ],
      [
        'verify, NATS down, password in its URL',
        ['verify', ...base, '--nats-url', `nats://urluser:${URL_PASSWORD}@127.0.0.1:${closedPort}`, '--timeout', '1s'],
        {},
        /not reachable|NATS/,
      ],
      [
        'relay, NATS refuses',
        ['relay', ...base, '--nats-url', server.url, '--http-port', '0', '--no-maintenance'],
        { FERRY_NATS_USER: 'ferry', FERRY_NATS_PASSWORD: `${NATS_PASSWORD}x` },
        /ferry relay starting/,
      ],
      [
        'relay, token in the NATS URL',
        ['relay', ...base, '--nats-url', `nats://${URL_TOKEN}@127.0.0.1:${server.port}`, '--http-port', '0', '--no-maintenance'],
        {},
        /ferry relay starting.*|"nats":\["nats:\/\/\*\*\*@/,
      ],
      ['relay, bad option next to secrets', ['relay', ...base, '--batch-size', 'lots'], natsEnv, /--batch-size/],
      [
        'status, database down',
        ['status', '--database-url', `postgres://postgres:${DB_PASSWORD}@127.0.0.1:${closedPort}/test`, '--schema', db.schema],
        {},
        /ECONNREFUSED|connect/i,
      ],
      ['status, malformed database URL with a password (flag)', ['status', '--database-url', malformedDbUrl], {}, /--database-url/],
      [
        'status, malformed database URL with a password (FERRY_DATABASE_URL)',
        ['status', '--schema', db.schema],
        { FERRY_DATABASE_URL: malformedDbUrl },
        /ferry: FERRY_DATABASE_URL is not a valid URL/,
      ],
      ['doctor, natss:// URL with a password (flag)', ['doctor', ...base, '--nats-url', natssUrl], {}, /--nats-url/],
      [
        'doctor, natss:// URL with a password (FERRY_NATS_URL)',
        ['doctor', ...base],
        { FERRY_NATS_URL: natssUrl },
        /--nats-url|FERRY_NATS_URL/,
      ],
      ['doctor, credentials file', ['doctor', ...base, '--nats-url', server.url, '--nats-creds', credsFile], {}, /NATS/],
      ['status --json, ?password= in the URL', ['status', '--database-url', queryUrl, '--schema', db.schema, '--json'], {}, /"pending"/],
      [
        'relay, ?password= in FERRY_DATABASE_URL',
        ['relay', '--schema', db.schema, '--nats-url', server.url, '--http-port', '0', '--no-maintenance'],
        { FERRY_DATABASE_URL: queryUrl, FERRY_NATS_USER: 'ferry', FERRY_NATS_PASSWORD: `${NATS_PASSWORD}x` },
        /"database":"postgres:[^"]*password=\*\*\*.*ferry relay starting/,
      ],
      ...shapes.flatMap(
        ([what, url]): Array<[string, string[], Record<string, string>, RegExp]> => [
          [`status, ${what} (flag)`, ['status', '--database-url', url, '--json'], {}, /ferry: --database-url .*value hidden/],
          [
            `doctor --json, ${what} (FERRY_DATABASE_URL)`,
            ['doctor', '--json'],
            { FERRY_DATABASE_URL: url },
            /ferry: FERRY_DATABASE_URL .*value hidden/,
          ],
        ],
      ),
      [
        'doctor --json, a token holding a / in the NATS URL',
        ['doctor', ...base, '--nats-url', slashTokenUrl, '--json'],
        {},
        /"check":"nats","status":"problem","message":"[^"]*Authorization Violation/,
      ],
      [
        'relay, a token holding a / in FERRY_NATS_URL',
        ['relay', ...base, '--http-port', '0', '--no-maintenance'],
        { FERRY_NATS_URL: slashTokenUrl },
        /"nats":\["nats:\/\/\*\*\*@127\.0\.0\.1:\d+"\].*ferry relay starting/,
      ],
    ];
    try {
      // The two migrations first, one after the other; the rest concurrently.
      const results = [];
      for (const [, args, env] of runs.slice(0, 2)) results.push(await ferry(args, env));
      // Six at a time: three dozen node processes at once on a shared 2-core machine hit the time bound.
      const rest = runs.slice(2);
      const done: Array<{ code: number | null; out: string }> = new Array(rest.length);
      let next = 0;
      await Promise.all(
        Array.from({ length: 6 }, async () => {
          while (next < rest.length) {
            const i = next++;
            const [, args, env] = rest[i] as (typeof rest)[number];
            done[i] = await ferry(args, env);
          }
        }),
      );
      results.push(...done);
      const missing: string[] = [];
      for (const [i, r] of results.entries()) {
        const [name, , , expected] = runs[i] ?? [];
        const what = `ferry ${name}`;
        assert.notEqual(r.code, null, `${what} ended by the time bound`);
        assertNoSecret(r.out, what);
        assertPayloadOnlyAtDebug(r.out, what);
        if (!expected?.test(r.out)) missing.push(`${what} did not print ${expected}:\n${r.out.slice(-800)}`);
      }
      assert.deepEqual(missing, [], missing.join('\n\n'));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('security - an inbox with a pino logger at debug logs no payload above debug, also when it fails and parks', async () => {
    const lines: string[] = [];
    const logger = pino({ level: 'debug' }, { write: (s: string) => lines.push(s) });
    const pool = new pg.Pool({ connectionString: secretUrl, max: 4 });
    const subject = 'seclogs.inbox';
    const js = jetstream(nc);
    const inboxStream = 'SECLOGSIN';
    await (await jetstreamManager(nc)).streams.add({ name: inboxStream, subjects: ['seclogsin.>'] });
    const send = async (type: string, key: string, body: string) => {
      const e = encodeEvent({
        id: randomUUID(),
        key,
        version: 1n,
        subject,
        type,
        source: 'sec',
        time: new Date(),
        contentType: 'application/json',
        data: Buffer.from(body),
        headers: {},
      });
      const h = headers();
      for (const [n, v] of e.headers) h.set(n, v);
      await js.publish(`seclogsin.${type.toLowerCase()}`, e.body, { headers: h });
    };
    const inbox = createInbox<{ Ok: unknown; Fail: unknown }>({
      pool,
      nc,
      stream: inboxStream,
      consumer: 'seclogs',
      schema: db.schema,
      bossSchema: `${db.schema}_boss`,
      maxDeliver: 2,
      backoffMs: [10],
      logger,
      handlers: {
        Ok: async () => {},
        Fail: async (event) => {
          throw new Error(`handler refused ${JSON.stringify(event.payload)}`);
        },
      },
    });
    try {
      await send('Ok', 'a', JSON.stringify({ marker: MARKER }));
      await send('Fail', 'b', JSON.stringify({ marker: MARKER }));
      await send('Unknown', 'c', JSON.stringify({ marker: MARKER }));
      await send('Ok', 'd', `{"marker": "${MARKER}", broken`);
      await inbox.start();
      await waitFor(() => inbox.counts().parked >= 3 && inbox.counts().applied >= 1, {
        timeoutMs: 20_000,
        what: 'one applied and three parked (handler failure, unknown type, bad JSON)',
      });
    } finally {
      await inbox.stop();
      await pool.end();
      await db.pool.query(`DROP SCHEMA IF EXISTS "${db.schema}_boss" CASCADE`);
    }
    const out = lines.join('');
    assert.ok(out.includes('parked'), 'the inbox logged its parking');
    assertNoSecret(out, 'inbox');
    // The handler's own error message quotes the payload: that is the application's text, and it
    // is logged with the error; the inbox itself adds no payload. Strip the handler's message first.
    assertPayloadOnlyAtDebug(
      out
        .split('\n')
        .filter((l) => !l.includes('handler refused'))
        .join('\n'),
      'inbox',
    );
  });
});
