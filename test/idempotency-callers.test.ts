// Issue 32, item 3: idempotency keys are scoped per caller. Every test here
// plays mallory against alice through a real binding on the real PostgreSQL.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { listMigrations, migrate, type PooledConnection, quoteIdentifier } from '@ferry/core';
import {
  canonicalJson,
  createIdempotency,
  expressIdempotency,
  fastifyIdempotency,
  fingerprintHash,
  IdempotencyPrincipalError,
  nodeHttpIdempotency,
  type OperationResult,
  ValidationError,
} from '@ferry/idempotency';
import { createTestDatabase, type TestDatabase } from '@ferry/testkit';
import express, { type Request } from 'express';

let db: TestDatabase;
let s: string;
const servers: Array<() => Promise<void>> = [];

before(async () => {
  db = await createTestDatabase({ prefix: 'idem_callers', migrate: ['idempotency'], max: 10 });
  s = quoteIdentifier(db.schema);
  await db.pool.query(`CREATE TABLE ${s}.orders (id serial PRIMARY KEY, api text NOT NULL, owner text NOT NULL, item text NOT NULL)`);
});
after(async () => {
  for (const close of servers) await close().catch(() => {});
  await db?.close();
});

/** The test app's authentication: the caller is whoever the `session` cookie names. */
function sessionOf(headers: IncomingMessage['headers']): string | undefined {
  return /(?:^|;\s*)session=([a-z]+)/.exec(headers.cookie ?? '')?.[1];
}

/** One order per execution, owned by the caller; answers with a fresh session cookie for that caller. */
function placeOrder(api: string) {
  return async (tx: PooledConnection, owner: string | undefined, body: unknown): Promise<OperationResult> => {
    const item = Buffer.isBuffer(body) ? body.toString('utf8') : JSON.stringify(body ?? null);
    const { rows } = await tx.query<{ id: number }>(`INSERT INTO ${s}.orders (api, owner, item) VALUES ($1, $2, $3) RETURNING id`, [
      api,
      owner ?? '(global)',
      item,
    ]);
    return {
      status: 201,
      body: { id: rows[0]?.id, owner: owner ?? '(global)' },
      headers: { 'Set-Cookie': `session=${owner ?? 'x'}; HttpOnly; Secure`, 'Authentication-Info': 'nextnonce="n1"', Location: '/orders' },
    };
  };
}

async function listen(server: Server): Promise<string> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  servers.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

interface Answer {
  status: number;
  headers: Headers;
  text: string;
  json: { id?: number; owner?: string; detail?: string; title?: string };
}

async function post(
  base: string,
  who: string | undefined,
  key: string | undefined,
  body: string,
  contentType = 'application/json',
  path = '/orders',
): Promise<Answer> {
  const headers: Record<string, string> = { 'content-type': contentType };
  if (who) headers.cookie = `session=${who}`;
  if (key !== undefined) headers['idempotency-key'] = key;
  const res = await fetch(`${base}${path}`, { method: 'POST', headers, body });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, json: text ? JSON.parse(text) : {} };
}

/** fetch joins repeated headers; node:http's setHeader with an array sends each value on its own field line. */
function postTwoKeys(base: string, keys: string[]): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(`${base}/orders`, { method: 'POST' }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => {
        text += c;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.on('error', reject);
    req.setHeader('content-type', 'application/json');
    req.setHeader('cookie', 'session=alice');
    req.setHeader('idempotency-key', keys);
    req.end('{"item":"two-keys"}');
  });
}

const orders = async (api: string, owner?: string) =>
  (
    await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${s}.orders WHERE api = $1 AND ($2::text IS NULL OR owner = $2)`, [
      api,
      owner ?? null,
    ])
  ).rows[0]?.n;

/** Alice and mallory against one binding: the sub-items of issue 32 item 3, each observable over HTTP. */
async function aliceAndMallory(base: string, api: string): Promise<void> {
  const body = '{"item":"book","qty":1}';

  // Alice's request runs and sets her session cookie; her retry replays it without the cookie.
  const alice = await post(base, 'alice', 'k-alice', body);
  assert.equal(alice.status, 201);
  assert.equal(alice.json.owner, 'alice');
  assert.match(alice.headers.get('set-cookie') ?? '', /^session=alice/, 'the first response keeps its Set-Cookie');
  const retry = await post(base, 'alice', 'k-alice', body);
  assert.equal(retry.status, 201);
  assert.equal(retry.headers.get('idempotent-replayed'), 'true');
  assert.equal(retry.text, alice.text, "alice's retry gets her stored answer");
  assert.equal(retry.headers.get('set-cookie'), null, 'Set-Cookie is never stored, so never replayed');
  assert.equal(retry.headers.get('authentication-info'), null, 'nor Authentication-Info');
  assert.equal(retry.headers.get('location'), '/orders', 'other headers are replayed');

  // Mallory sends alice's key and body: she gets an execution of her own, never alice's answer or cookie.
  const mallory = await post(base, 'mallory', 'k-alice', body);
  assert.equal(mallory.status, 201);
  assert.equal(mallory.headers.get('idempotent-replayed'), null, "mallory is not replayed alice's answer");
  assert.equal(mallory.json.owner, 'mallory');
  assert.notEqual(mallory.json.id, alice.json.id);
  assert.doesNotMatch(mallory.headers.get('set-cookie') ?? '', /alice/);
  // From now on k-alice is also mallory's own key: her reuse of it with another body is her conflict, not alice's.
  assert.equal((await post(base, 'mallory', 'k-alice', '{"item":"other"}')).status, 422, "mallory's own key, reused by her: 422");
  assert.equal((await post(base, 'alice', 'k-alice', body)).text, alice.text, 'alice still gets her own answer');

  // Mallory uses a key first (squatting): alice's request with that key still runs normally.
  const squat = await post(base, 'mallory', 'k-squat', '{"item":"squat"}');
  assert.equal(squat.status, 201);
  const notSquatted = await post(base, 'alice', 'k-squat', body);
  assert.equal(notSquatted.status, 201, 'alice is not locked out of her key by mallory (was 422)');
  assert.equal(notSquatted.headers.get('idempotent-replayed'), null);
  assert.equal(notSquatted.json.owner, 'alice');
  assert.equal((await post(base, 'alice', 'k-squat', body)).headers.get('idempotent-replayed'), 'true');

  // A key without a caller is refused, never treated as global.
  const anonymous = await post(base, undefined, 'k-alice', body);
  assert.equal(anonymous.status, 401);
  assert.match(anonymous.headers.get('content-type') ?? '', /^application\/problem\+json/);
  assert.match(anonymous.json.detail ?? '', /principal/);

  // Two Idempotency-Key headers are a 400, as two field lines and once joined into one.
  const two = await postTwoKeys(base, ['k-a1', 'k-a2']);
  assert.equal(two.status, 400, two.text);
  assert.match(JSON.parse(two.text).detail, /2 Idempotency-Key headers/);
  const joined = await post(base, 'alice', 'k-a1, k-a2', body);
  assert.equal(joined.status, 400);
  assert.match(joined.json.detail ?? '', /comma/);
  // A comma inside a quoted (structured-field) key is one key.
  assert.equal((await post(base, 'alice', '"k-a1, k-a2"', body)).status, 201);

  assert.equal(await orders(api, 'alice'), 3, 'alice: k-alice, k-squat, the quoted key; each once');
  assert.equal(await orders(api, 'mallory'), 2, 'mallory: her k-alice and k-squat');

  // The principal is stored as a digest: no user id in clear in the table.
  const { rows } = await db.pool.query<{ principal: string; headers: Record<string, string> }>(
    `SELECT principal, headers FROM ${s}.idempotency_keys WHERE scope = $1`,
    [api],
  );
  const alicePrincipal = createHash('sha256').update('ferry:idempotency:principal\0alice').digest('hex');
  assert.ok(rows.some((r) => r.principal === alicePrincipal));
  for (const r of rows) {
    assert.match(r.principal, /^[0-9a-f]{64}$/);
    assert.deepEqual(
      Object.keys(r.headers).filter((h) => /cookie|authentication-info/i.test(h)),
      [],
      'no identity header stored',
    );
  }
}

/** The fingerprint over HTTP: same key, same caller, requests that used to collide. */
async function collisions(base: string): Promise<void> {
  const form = await post(base, 'alice', 'k-fp', 'amount=1', 'application/x-www-form-urlencoded');
  assert.equal(form.status, 201);
  // {"$bytes": base64("amount=1")} hashed like the raw bytes amount=1 in fingerprint v1.
  const forged = await post(base, 'alice', 'k-fp', '{"$bytes":"YW1vdW50PTE="}', 'application/json');
  assert.equal(forged.status, 422, 'a JSON body spelling out the bytes is another request');
  assert.equal((await post(base, 'alice', 'k-fp', 'amount=1', 'text/plain')).status, 422, 'the same bytes under another content type');
  assert.equal(
    (await post(base, 'alice', 'k-fp', 'amount=1', 'application/x-www-form-urlencoded', '/orders?amount=2')).status,
    422,
    'the query string is part of the target',
  );
  assert.equal(
    (await post(base, 'alice', 'k-fp', 'amount=1', 'application/x-www-form-urlencoded')).headers.get('idempotent-replayed'),
    'true',
  );
}

describe('idempotency - keys are scoped per caller', () => {
  test('idempotency - through nodeHttpIdempotency, mallory never gets alice’s answer, never squats her key, and no Set-Cookie is replayed', async () => {
    const api = 'node';
    const keys = createIdempotency({ schema: db.schema, scope: api });
    const base = await listen(
      createServer(
        nodeHttpIdempotency(keys, {
          pool: db.pool,
          principal: (req) => sessionOf(req.headers),
          handler: (req, tx, body) => placeOrder(api)(tx, sessionOf(req.headers), body),
        }),
      ),
    );
    await aliceAndMallory(base, api);
    await collisions(base);
  });

  test('idempotency - through the Express binding, mallory never gets alice’s answer, never squats her key, and no Set-Cookie is replayed', async () => {
    const api = 'express';
    const keys = createIdempotency({ schema: db.schema, scope: api });
    const app = express().post(
      '/orders',
      express.json(),
      expressIdempotency<Request>(keys, {
        pool: db.pool,
        principal: (req) => sessionOf(req.headers),
        handler: (req, tx) => placeOrder(api)(tx, sessionOf(req.headers), req.body),
      }),
    );
    const base = await listen(createServer(app));
    await aliceAndMallory(base, api);
    // express.json() leaves a form body unread: the binding reads and fingerprints its bytes.
    await collisions(base);
  });

  test('idempotency - a binding without principal or globalKeys is refused at construction, naming the option and the fix', () => {
    const handler = async () => ({ status: 200 });
    const keys = createIdempotency({ schema: db.schema });
    const bindings = [
      ['nodeHttpIdempotency', (o: object) => nodeHttpIdempotency(keys, { pool: db.pool, handler, ...o })],
      ['expressIdempotency', (o: object) => expressIdempotency(keys, { pool: db.pool, handler, ...o })],
      ['fastifyIdempotency', (o: object) => fastifyIdempotency(keys, { pool: db.pool, handler, ...o })],
    ] as const;
    for (const [name, bind] of bindings) {
      assert.throws(
        () => bind({}),
        (err: unknown) => {
          assert.ok(err instanceof ValidationError);
          assert.equal(err.field, 'principal');
          assert.match(err.message, new RegExp(`^${name} needs principal: .*globalKeys: true`));
          return true;
        },
      );
      assert.throws(() => bind({ principal: () => 'u', globalKeys: true }), { field: 'principal' }, `${name}: both`);
      assert.throws(() => bind({ principal: 'global' }), { field: 'principal' }, `${name}: not a function`);
      assert.throws(() => bind({ globalKeys: 'yes' }), { field: 'globalKeys' }, `${name}: not a boolean`);
      assert.doesNotThrow(() => bind({ globalKeys: true }), name);
      assert.doesNotThrow(() => bind({ principal: () => 'u' }), name);
    }
  });

  test('idempotency - with globalKeys: true, the application’s explicit choice, every caller shares a key, still without Set-Cookie', async () => {
    const api = 'global';
    const keys = createIdempotency({ schema: db.schema, scope: api });
    const base = await listen(
      createServer(
        nodeHttpIdempotency(keys, {
          pool: db.pool,
          globalKeys: true,
          handler: (_req, tx, body) => placeOrder(api)(tx, undefined, body),
        }),
      ),
    );
    const first = await post(base, 'alice', 'k-global', '{"item":"shared"}');
    assert.equal(first.status, 201);
    const other = await post(base, undefined, 'k-global', '{"item":"shared"}');
    assert.equal(other.headers.get('idempotent-replayed'), 'true');
    assert.equal(other.headers.get('set-cookie'), null);
    assert.equal(await orders(api), 1);
    const { rows } = await db.pool.query<{ principal: string }>(`SELECT principal FROM ${s}.idempotency_keys WHERE scope = $1`, [api]);
    assert.deepEqual(
      rows.map((r) => r.principal),
      ['*'],
    );
  });

  test('idempotency - run() needs a principal or globalKey: true, and another principal’s same key is another key', async () => {
    const keys = createIdempotency({ schema: db.schema, scope: 'run-callers' });
    let executions = 0;
    const op = async () => {
      executions++;
      return { status: 201, body: { n: executions }, headers: { 'set-cookie': 'session=s', 'X-Kept': 'yes' } };
    };
    const fingerprint = { method: 'POST', path: '/orders', contentType: 'application/json', body: { item: 'book' } };
    for (const principal of [undefined, null, '', 42, 'x'.repeat(1025)]) {
      await assert.rejects(
        keys.run(db.pool, { key: 'r1', principal: principal as string, fingerprint }, op),
        IdempotencyPrincipalError,
        String(principal),
      );
    }
    await assert.rejects(keys.run(db.pool, { key: 'r1', principal: 'alice', globalKey: true, fingerprint }, op), {
      name: 'ValidationError',
      field: 'principal',
    });
    assert.equal(executions, 0, 'refused before anything ran');
    const alice = await keys.run(db.pool, { key: 'r1', principal: 'alice', fingerprint }, op);
    assert.equal(alice.headers['set-cookie'], 'session=s', 'the first answer keeps its cookie');
    const mallory = await keys.run(db.pool, { key: 'r1', principal: 'mallory', fingerprint }, op);
    assert.equal(mallory.replayed, false);
    assert.deepEqual(mallory.body, { n: 2 });
    const again = await keys.run(db.pool, { key: 'r1', principal: 'alice', fingerprint }, op);
    assert.equal(again.replayed, true);
    assert.deepEqual(again.body, { n: 1 });
    assert.deepEqual(again.headers, { 'X-Kept': 'yes' });
  });
});

describe('idempotency - the fingerprint', () => {
  const base = { method: 'POST', path: '/orders' };
  const hex = (fp: Parameters<typeof fingerprintHash>[0]) => fingerprintHash(fp).toString('hex');

  test('idempotency - raw bytes never collide with a JSON body that spells them out as {"$bytes": …}', () => {
    const ct = 'application/x-www-form-urlencoded';
    const raw = hex({ ...base, contentType: ct, body: Buffer.from('amount=1') });
    assert.notEqual(raw, hex({ ...base, contentType: ct, body: { $bytes: 'YW1vdW50PTE=' } }), 'same content type');
    assert.notEqual(raw, hex({ ...base, contentType: 'application/json', body: { $bytes: 'YW1vdW50PTE=' } }));
    assert.notEqual(raw, hex({ ...base, contentType: ct, body: 'amount=1' }), 'bytes and a parsed string');
    assert.throws(() => canonicalJson({ a: Buffer.from('x') }), ValidationError, 'bytes inside a JSON value are refused');
    assert.equal(raw, hex({ ...base, contentType: ct, body: new Uint8Array(Buffer.from('amount=1')) }), 'bytes are bytes');
  });

  test('idempotency - content type, query string and field boundaries are all part of the fingerprint', () => {
    const body = Buffer.from('{"a":1}');
    const json = hex({ ...base, contentType: 'application/json', body });
    assert.notEqual(json, hex({ ...base, contentType: 'text/plain', body }));
    assert.notEqual(json, hex({ ...base, contentType: null, body }));
    assert.notEqual(hex({ ...base, contentType: null, body }), hex({ ...base, contentType: '', body }), 'absent is not empty');
    assert.notEqual(json, hex({ ...base, path: '/orders?a=1', contentType: 'application/json', body }));
    assert.notEqual(json, hex({ ...base, contentType: 'application/json', body: Buffer.from('{"a":1} ') }), 'every byte counts');
    // Length prefixes: moving bytes from one field to the next is another request.
    assert.notEqual(
      hex({ method: 'POST', path: '/a', contentType: 'bc', body: Buffer.from('d') }),
      hex({ method: 'POST', path: '/ab', contentType: 'c', body: Buffer.from('d') }),
    );
    assert.notEqual(hex({ ...base, body: undefined }), hex({ ...base, body: Buffer.alloc(0) }));
    assert.equal(json, hex({ ...base, method: 'post', contentType: 'application/json', body }), 'the method is case-insensitive');
  });
});

describe('idempotency - the upgrade to migration 2', () => {
  test('idempotency - rows recorded before principals joined the key are never replayed to anyone, nor block a key', async () => {
    const old = await createTestDatabase({ prefix: 'idem_upgrade', migrate: [] });
    try {
      const o = quoteIdentifier(old.schema);
      // A database at idempotency migration 1, as the previous release left it.
      const first = listMigrations('idempotency')[0];
      assert.equal(first?.version, 1);
      await old.pool.query(
        `CREATE TABLE ${o}.migrations (migration_set text NOT NULL, version integer NOT NULL, name text NOT NULL,
           applied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (migration_set, version))`,
      );
      await old.pool.query(first?.template.replaceAll(':SCHEMA', o) ?? '');
      await old.pool.query(`INSERT INTO ${o}.migrations (migration_set, version, name) VALUES ('idempotency', 1, $1)`, [first?.name]);
      // Alice's answer, stored by the old default (no principal), cookie and all.
      await old.pool.query(
        `INSERT INTO ${o}.idempotency_keys (scope, key, fingerprint, status, headers, body, body_kind, expires_at)
         VALUES ('api', 'k-old', $1, 201, '{"Set-Cookie": "session=alice"}', $2, 'json', now() + interval '1 hour')`,
        [Buffer.alloc(32, 7), Buffer.from('{"owner":"alice"}')],
      );
      const result = await migrate({ pool: old.pool, schema: old.schema, set: 'idempotency' });
      assert.deepEqual(
        result.applied.map((m) => m.version),
        [2],
      );
      const { rows } = await old.pool.query<{ principal: string }>(`SELECT principal FROM ${o}.idempotency_keys`);
      assert.deepEqual(
        rows.map((r) => r.principal),
        [''],
        'old rows keep principal ""',
      );
      const keys = createIdempotency({ schema: old.schema, scope: 'api' });
      const fingerprint = { method: 'POST', path: '/orders', contentType: 'application/json', body: { item: 'book' } };
      const op = async () => ({ status: 201, body: { owner: 'new' } });
      for (const caller of [{ principal: 'mallory' }, { principal: 'alice' }, { globalKey: true }]) {
        const r = await keys.run(old.pool, { key: 'k-old', ...caller, fingerprint }, op);
        assert.equal(r.replayed, false, `${JSON.stringify(caller)}: runs as a new request, neither replayed nor 422`);
        assert.deepEqual(r.body, { owner: 'new' });
      }
      await assert.rejects(
        old.pool.query(
          `INSERT INTO ${o}.idempotency_keys (scope, principal, key, fingerprint, expires_at) VALUES ('api', 'alice', 'k', $1, now())`,
          [Buffer.alloc(32)],
        ),
        /idempotency_keys_principal_check/,
        'a principal in clear is refused by the table',
      );
    } finally {
      await old.close();
    }
  });
});
