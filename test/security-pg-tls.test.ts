// PostgreSQL TLS options travel in the connection URL (sslmode, sslrootcert,
// sslcert, sslkey, as node-postgres parses them). The local test server has no
// TLS, so a URL that requires it must fail with pg's clear reason, not a crash;
// sslmode=disable must still work, proving the parameter reaches pg.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { createRelay } from '@ferry/relay';
import { createTestDatabase, type TestDatabase } from '@ferry/testkit';
import { FERRY_BIN } from './relay-helpers.js';

function ferry(args: string[], timeoutMs = 20_000): Promise<{ code: number | null; out: string; err: string }> {
  const proc = spawn(process.execPath, [FERRY_BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  proc.stdout.on('data', (b: Buffer) => {
    out += b.toString();
  });
  proc.stderr.on('data', (b: Buffer) => {
    err += b.toString();
  });
  const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
  return new Promise((resolve) =>
    proc.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    }),
  );
}

describe('PostgreSQL TLS parameters in the URL reach node-postgres', () => {
  let db: TestDatabase;
  const withParams = (params: string) => `${db.url}${db.url.includes('?') ? '&' : '?'}${params}`;

  before(async () => {
    db = await createTestDatabase({ prefix: 'sec_pgtls', lanes: 2 });
  });

  after(async () => {
    await db?.close();
  });

  test('security - sslmode=require against a server without TLS fails every command with one clear line, never a crash', async () => {
    const url = withParams('sslmode=require');
    const runs = await Promise.all([
      ferry(['migrate', '--database-url', url, '--schema', db.schema]),
      ferry(['status', '--database-url', url, '--schema', db.schema]),
      ferry(['dlq', 'list', '--database-url', url, '--schema', db.schema]),
      ferry(['relay', '--database-url', url, '--schema', db.schema, '--http-port', '0', '--no-maintenance']),
    ]);
    for (const [i, r] of runs.entries()) {
      const what = ['migrate', 'status', 'dlq list', 'relay'][i];
      assert.equal(r.code, 1, `${what}: exit 1 (runtime failure), got ${r.code}: ${r.err.slice(-500)}`);
      const last = r.err.trim().split('\n').at(-1) ?? '';
      assert.equal(last, 'ferry: The server does not support SSL connections', `${what}: ${r.err.slice(-500)}`);
      assert.doesNotMatch(r.err, /UnhandledPromiseRejection|TypeError|uncaught/i, `${what}: a crash`);
    }
  });

  test('security - sslrootcert naming a missing file is reported with the file, and sslmode=disable connects', async () => {
    const missing = await ferry([
      'status',
      '--database-url',
      withParams('sslmode=verify-full&sslrootcert=/nonexistent/ferry-ca.pem'),
      '--schema',
      db.schema,
    ]);
    assert.equal(missing.code, 1, missing.err);
    assert.match(missing.err.trim().split('\n').at(-1) ?? '', /^ferry: ENOENT.*\/nonexistent\/ferry-ca\.pem/);
    const plain = await ferry(['status', '--database-url', withParams('sslmode=disable'), '--schema', db.schema, '--json']);
    assert.equal(plain.code, 0, plain.err);
    assert.ok(JSON.parse(plain.out), 'status as JSON');
  });

  test('security - createRelay with sslmode=require in databaseUrl rejects start() with the reason', async () => {
    // uselibpqcompat=true: plain sslmode=require makes pg print a 7-line deprecation SECURITY WARNING into
    // this (the test runner's) process, which npm test showed to every reader (issue 16). Same failure either way.
    const relay = createRelay({ databaseUrl: withParams('sslmode=require&uselibpqcompat=true'), schema: db.schema, maintenance: false });
    await assert.rejects(relay.start(), /does not support SSL/);
    await relay.stop().catch(() => {});
  });
});
