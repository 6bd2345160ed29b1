// Issue 13, item 4: stored rows cannot forge the wire headers. A least-privileged
// publisher role calling the publish functions by hand is refused (reserved header
// names, bad subjects, CR/LF, over-long values), and a row written around the
// functions (the owner's own INSERT) still reaches the stream with the reserved
// headers taken from its own columns only. The stream is read directly.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import {
  grantsSql,
  isValidationError,
  quoteIdentifier,
  SQLSTATE,
  sqlState,
  validateHeaders,
  validateKey,
  validateSubject,
  validateType,
} from '@ferry/core';
import { refusedByPublishFunction } from '@ferry/publisher';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream, uniqueName, waitFor } from '@ferry/testkit';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import pg from 'pg';
import { countPending, type RelayProcess, spawnRelay } from './relay-helpers.js';

interface WireMessage {
  subject: string;
  headers: Array<[string, string]>;
}

/** Every message of the stream with every header value, in stream order. */
async function readWire(stream: TestStream): Promise<WireMessage[]> {
  const jsm = await jetstreamManager(stream.nc);
  const total = (await jsm.streams.info(stream.name)).state.messages;
  const out: WireMessage[] = [];
  if (total === 0) return out;
  const consumer = await jetstream(stream.nc).consumers.get(stream.name);
  const batch = await consumer.fetch({ max_messages: total, expires: 2000 });
  for await (const m of batch) {
    const headers: Array<[string, string]> = [];
    if (m.headers) for (const [name, values] of m.headers) for (const v of values) headers.push([name, v]);
    out.push({ subject: m.subject, headers });
  }
  return out;
}

const FORGED = {
  'ce-partitionkey': 'VICTIM',
  'ce-sequence': '00000000000000000999',
  'ce-type': 'Forged',
  'Nats-Msg-Id': 'forged',
};

describe('hostile stored rows: nothing forged on the wire', () => {
  let db: TestDatabase;
  let stream: TestStream;
  let s: string;
  const role = uniqueName('fpub');
  let pubPool: pg.Pool;
  let relay: RelayProcess | undefined;

  /** publish_event as the publisher role, with everything valid except what `patch` changes. */
  const publishOne = (patch: { subject?: string; key?: string; headers?: unknown; type?: string }) =>
    pubPool.query(`SELECT * FROM ${s}.publish_event($1, $2, NULL, $3, $4, 'hostile-test', 'application/json', $5, $6, now(), NULL, true)`, [
      randomUUID(),
      patch.key ?? 'K2',
      patch.subject ?? `${stream.prefix}.orders`,
      patch.type ?? 'Real',
      Buffer.from('{}'),
      JSON.stringify(patch.headers ?? {}),
    ]);

  async function refusal(p: Promise<unknown>): Promise<{ code: string | undefined; column: unknown; message: string }> {
    try {
      await p;
    } catch (err) {
      return { code: sqlState(err), column: (err as { column?: unknown }).column, message: (err as Error).message };
    }
    return { code: undefined, column: undefined, message: 'accepted' };
  }

  before(async () => {
    db = await createTestDatabase({ prefix: 'hostile_rows', lanes: 2 });
    s = quoteIdentifier(db.schema);
    stream = await createTestStream({ prefix: 'hostilerows' });
    await db.pool.query(`CREATE ROLE ${quoteIdentifier(role)} LOGIN`);
    await db.pool.query(grantsSql({ role, for: 'publisher', schema: db.schema }));
    const u = new URL(db.url);
    u.username = role;
    u.password = '';
    pubPool = new pg.Pool({ connectionString: u.toString(), max: 2 });
  });

  after(async () => {
    if (relay && relay.proc.exitCode === null && relay.proc.signalCode === null) relay.proc.kill('SIGKILL');
    await pubPool?.end().catch(() => {});
    await db?.pool.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`).catch(() => {});
    await db?.pool.query(`DROP OWNED BY ${quoteIdentifier(role)}`).catch(() => {});
    await db?.pool.query(`DROP ROLE IF EXISTS ${quoteIdentifier(role)}`).catch(() => {});
    await stream?.close();
    await db?.close();
  });

  test('publish functions - the publisher role is refused every reserved header name, in any case, naming the header', async () => {
    const names = [
      ...Object.keys(FORGED),
      'CE-TYPE',
      'Ce-Id',
      'nats-expected-stream',
      'NATS-MSG-ID',
      'content-type',
      'Content-Type',
      'ce-',
    ];
    for (const name of names) {
      const r = await refusal(publishOne({ headers: { [name]: 'x' } }));
      assert.equal(r.code, SQLSTATE.invalidParameterValue, `${name}: ${r.message}`);
      assert.equal(r.column, `headers.${name}`);
      assert.match(r.message, /is reserved/);
    }
    const batch = await refusal(
      pubPool.query(
        `SELECT * FROM ${s}.publish_events($1::uuid[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bytea[], $9::jsonb[], $10::timestamptz[], NULL, true)`,
        [
          [randomUUID(), randomUUID()],
          ['K2', 'K3'],
          [null, null],
          [`${stream.prefix}.orders`, `${stream.prefix}.orders`],
          ['Real', 'Real'],
          ['hostile-test', 'hostile-test'],
          ['application/json', 'application/json'],
          [Buffer.from('{}'), Buffer.from('{}')],
          ['{}', JSON.stringify(FORGED)],
          [new Date().toISOString(), new Date().toISOString()],
        ],
      ),
    );
    assert.equal(batch.code, SQLSTATE.invalidParameterValue, batch.message);
    assert.match(String(batch.column), /^events\[1\]\.headers\./);
    assert.equal(await countPending(db.pool, db.schema), 0, 'nothing was written');
  });

  test('publish functions - a bad subject, CR/LF, an over-long value or a non-string value is refused at publish', async () => {
    const cases: Array<[Parameters<typeof publishOne>[0], string | RegExp]> = [
      [{ subject: 'a..b' }, 'subject'],
      [{ subject: 'orders.*' }, 'subject'],
      [{ subject: 'orders >' }, 'subject'],
      [{ subject: '' }, 'subject'],
      [{ subject: 'x'.repeat(1025) }, 'subject'],
      [{ key: 'K2\r\nce-type: Forged' }, 'key'],
      [{ key: '' }, 'key'],
      [{ type: 'T\n' }, 'type'],
      [{ headers: { 'x-a': 'ok\r\nce-type: Forged' } }, 'headers.x-a'],
      [{ headers: { 'x-a': 'v'.repeat(4097) } }, 'headers.x-a'],
      [{ headers: { 'x-a': 5 } }, 'headers.x-a'],
      [{ headers: { 'bad name': 'v' } }, 'headers.bad name'],
      // jsonb keeps its own key order, so either spelling may be named.
      [{ headers: { 'x-a': 'a', 'X-A': 'b' } }, /^headers\.(x-a|X-A)$/],
      [{ headers: ['x'] }, 'headers'],
    ];
    for (const [patch, column] of cases) {
      const r = await refusal(publishOne(patch));
      assert.equal(r.code, SQLSTATE.invalidParameterValue, `${JSON.stringify(patch).slice(0, 80)}: ${r.message}`);
      if (typeof column === 'string') assert.equal(r.column, column, r.message);
      else assert.match(String(r.column), column, r.message);
    }
    // The publisher turns the refusal into a ValidationError on the field.
    let caught: unknown;
    try {
      await publishOne({ headers: { 'ce-type': 'Forged' } });
    } catch (err) {
      caught = refusedByPublishFunction(err);
    }
    assert.ok(isValidationError(caught), String(caught));
    assert.equal(caught.field, 'headers.ce-type');
    assert.match(caught.message, /ce-type.*reserved/);
    // A tab inside a value and a valid subject still publish.
    await publishOne({ headers: { 'x-note': 'a\tb' } });
    assert.equal(await countPending(db.pool, db.schema), 1);
  });

  test('publish functions - refuse exactly what the publisher refuses (keys, types, subjects, header names and values)', async () => {
    const chars = [
      '',
      ' ',
      '\t',
      '\n',
      '\r',
      '\u0001',
      '\u007f',
      '\u0085',
      '\u00a0',
      '\u2028',
      '\u3000',
      '\ufeff',
      'é',
      '*',
      '>',
      '.',
      ':',
      '@',
    ];
    // Subjects NATS reserves, and look-alikes that are ordinary (outbox migration 000016).
    const texts = new Set<string>([
      'a',
      'order-42',
      'x'.repeat(256),
      'x'.repeat(257),
      '$',
      '$JS.API.X',
      '_INBOX',
      '_INBOX.x',
      '_R_.x',
      '_GR_.x',
    ]);
    for (const t of ['_inbox.x', 'a._INBOX', 'a.$JS', 'x$', '_INBOXES', '_R']) texts.add(t);
    for (const c of chars) for (const t of [c, `a${c}`, `${c}a`, `a${c}b`]) texts.add(t);
    const js = (fn: () => unknown) => {
      try {
        fn();
        return true;
      } catch {
        return false;
      }
    };
    const sqlOk = async (e: { key?: string; subject?: string; type?: string; headers?: unknown }) => {
      const { rows } = await db.pool.query<{ ok: boolean }>(
        `SELECT ${s}.publish_events_ok($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::jsonb[]) AS ok`,
        [[e.key ?? 'k'], [e.subject ?? 'a.b'], [e.type ?? 'T'], ['src'], ['application/json'], [JSON.stringify(e.headers ?? {})]],
      );
      return rows[0]?.ok;
    };
    const disagreements: string[] = [];
    for (const t of texts) {
      const cases: Array<[string, boolean, Parameters<typeof sqlOk>[0]]> = [
        ['key', js(() => validateKey(t)), { key: t }],
        ['type', js(() => validateType(t)), { type: t }],
        ['subject', js(() => validateSubject(t)), { subject: t }],
        ['header value', js(() => validateHeaders({ 'x-a': t })), { headers: { 'x-a': t } }],
        ['header name', js(() => validateHeaders({ [t]: 'v' })), { headers: { [t]: 'v' } }],
      ];
      for (const [what, jsOk, event] of cases) {
        const ok = await sqlOk(event);
        if (ok !== jsOk) disagreements.push(`${what} ${JSON.stringify(t).slice(0, 40)}: publisher ${jsOk}, function ${ok}`);
      }
    }
    assert.deepEqual(disagreements, []);
  });

  test('relay - a row stored with forged ce-*/Nats-*/Content-Type headers goes out as its own key, version, type and id', async () => {
    // Written around the functions (the owner's INSERT): the codec is the last line of defence.
    const id = randomUUID();
    await db.pool.query(
      `INSERT INTO ${s}.key_versions (key, version) VALUES ('K9', 1);
       INSERT INTO ${s}.outbox (id, key, version, subject, type, source, content_type, data, headers, occurred_at)
       VALUES ('${id}', 'K9', 1, '${stream.prefix}.orders', 'Real', 'hostile-test', 'application/json', '\\x7b7d',
               '${JSON.stringify({
                 ...FORGED,
                 'CE-PARTITIONKEY': 'VICTIM',
                 'Ce-Type': 'Forged',
                 'nats-msg-id': 'forged',
                 'content-type': 'text/forged',
                 'ce-source': 'forged',
                 'x-kept': 'yes',
               })}', now())`,
    );
    relay = spawnRelay([
      '--database-url',
      db.url,
      '--schema',
      db.schema,
      '--nats-url',
      'nats://127.0.0.1:4222',
      '--http-port',
      '0',
      '--poll-interval-ms',
      '50',
    ]);
    await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 20_000, what: 'the relay drained' });
    relay.proc.kill('SIGTERM');
    await relay.exited;
    const wire = await readWire(stream);
    const forged = wire.find((m) => m.headers.some(([n, v]) => n === 'ce-id' && v === id));
    assert.ok(forged, 'the forged row reached the stream');
    const lower = forged.headers.map(([n, v]) => [n.toLowerCase(), v] as const);
    const values = (name: string) => lower.filter(([n]) => n === name).map(([, v]) => v);
    assert.deepEqual(values('ce-partitionkey'), ['K9']);
    assert.deepEqual(values('ce-sequence'), ['00000000000000000001']);
    assert.deepEqual(values('ce-type'), ['Real']);
    assert.deepEqual(values('ce-source'), ['hostile-test']);
    assert.deepEqual(values('nats-msg-id'), [id]);
    assert.deepEqual(values('content-type'), ['application/json']);
    assert.deepEqual(values('x-kept'), ['yes']);
    for (const [, v] of forged.headers)
      assert.ok(!['VICTIM', 'Forged', 'forged', 'text/forged'].includes(v), `forged value ${v} on the wire`);
  });
});
