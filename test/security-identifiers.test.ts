// Hostile identifiers through every entry point: the API factories, every CLI
// command's flags and their FERRY_* variables. Each must fail with a clear,
// typed error (exit 2 and one line naming the option and the value for the
// CLI) before touching the database: a catalog snapshot is compared.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { isValidationError, migrate, quoteIdentifier } from '@ferry/core';
import { createIdempotency } from '@ferry/idempotency';
import { createInbox } from '@ferry/inbox';
import { createPublisher } from '@ferry/publisher';
import { createRelay, main } from '@ferry/relay';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream } from '@ferry/testkit';
import { FERRY_BIN } from './relay-helpers.js';

const LONG = 'z'.repeat(10_240);
/** Injection, Cyrillic look-alike (у is U+0443), fullwidth letters, a 10 KB name, an empty one. */
const HOSTILE_IDENTIFIERS = ['x"; drop table t; --', 'ferrу', 'ＦＥＲＲＹ', LONG, ''];
/** JetStream names additionally must not carry subject tokens. */
const HOSTILE_NATS_NAMES = ['x"; drop table t; --', 'ORDERS.>', 'A*', LONG, ''];

describe('hostile identifiers are refused at every entry point, the database untouched', () => {
  let db: TestDatabase;
  let stream: TestStream;
  let snapshotBefore: string;

  /** Schemas that are not plain identifiers or look like a truncated long name, and the tables of this test's schema. */
  async function snapshot(): Promise<string> {
    const { rows } = await db.pool.query<{ nspname: string; relname: string | null }>(
      `SELECT n.nspname, c.relname FROM pg_namespace n LEFT JOIN pg_class c ON c.relnamespace = n.oid
        WHERE n.nspname = $1 OR n.nspname !~ '^[a-z_][a-z0-9_]*$' OR n.nspname LIKE 'zzzzzzzz%' OR n.nspname LIKE 'x%drop%'
        ORDER BY 1, 2`,
      [db.schema],
    );
    return JSON.stringify(rows);
  }

  before(async () => {
    db = await createTestDatabase({ prefix: 'sec_ident', lanes: 2 });
    await db.pool.query(`CREATE TABLE ${quoteIdentifier(db.schema)}.t (x int)`);
    stream = await createTestStream({ prefix: 'secident' });
    snapshotBefore = await snapshot();
  });

  after(async () => {
    await stream?.close();
    await db?.close();
  });

  async function cli(args: string[], env: Record<string, string> = {}): Promise<{ code: number; out: string; err: string }> {
    const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
    Object.assign(process.env, env);
    const out: string[] = [];
    const err: string[] = [];
    try {
      const code = await main(['node', 'ferry', ...args], { out: (l) => out.push(l), err: (l) => err.push(l), env: process.env });
      return { code, out: out.join('\n'), err: err.join('\n') };
    } finally {
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  }

  function assertUsageError(r: { code: number; out: string; err: string }, option: string, value: string, what: string): void {
    assert.equal(r.code, 2, `${what}: exit code (stderr: ${r.err.slice(0, 300)})`);
    const lines = r.err.split('\n').filter((l) => l.trim() !== '' && !l.startsWith('(run with --help'));
    assert.equal(lines.length, 1, `${what}: one line, got ${JSON.stringify(r.err.slice(0, 500))}`);
    const line = lines[0] ?? '';
    assert.ok(line.includes(option), `${what}: names ${option}: ${line.slice(0, 200)}`);
    const shown = value.slice(0, 12);
    assert.ok(line.includes(shown) || line.includes(JSON.stringify(shown).slice(1, -1)), `${what}: names the value: ${line.slice(0, 200)}`);
    assert.equal(r.out, '', `${what}: nothing on stdout`);
  }

  const url = () => db.url;

  /** [command args before the bad value, option under test, env var or undefined]. */
  const identifierEntryPoints = (): Array<[string[], string, string | undefined]> => [
    [['migrate', '--database-url', url()], '--schema', 'FERRY_SCHEMA'],
    [['migrate', '--database-url', url(), '--inbox', '--boss'], '--boss-schema', 'FERRY_BOSS_SCHEMA'],
    [['migrate', '--print-grants', '--for', 'relay'], '--role', undefined],
    [['relay', '--database-url', url(), '--http-port', '0'], '--schema', 'FERRY_SCHEMA'],
    [['dlq', 'list', '--database-url', url()], '--schema', 'FERRY_SCHEMA'],
    [['inbox', 'parked', 'list', '--database-url', url()], '--schema', 'FERRY_SCHEMA'],
    [['inbox', 'parked', 'list', '--database-url', url()], '--boss-schema', 'FERRY_BOSS_SCHEMA'],
    [['inbox', 'parked', 'list', '--database-url', url()], '--consumer', 'FERRY_INBOX_CONSUMER'],
    [['status', '--database-url', url()], '--schema', 'FERRY_SCHEMA'],
    [['replay', '--database-url', url(), '--from-seq', '1'], '--schema', 'FERRY_SCHEMA'],
    [['doctor', '--database-url', url()], '--schema', 'FERRY_SCHEMA'],
    [['verify', '--database-url', url(), '--timeout', '1s'], '--schema', 'FERRY_SCHEMA'],
  ];

  test('security - every CLI identifier flag and its FERRY_* variable refuse hostile names with exit 2 and one line', async () => {
    let checked = 0;
    for (const [args, option, envVar] of identifierEntryPoints()) {
      for (const bad of HOSTILE_IDENTIFIERS) {
        const what = `ferry ${args[0]} ${option} ${JSON.stringify(bad.slice(0, 20))}`;
        if (bad !== '') assertUsageError(await cli([...args, option, bad]), option, bad, what);
        else assert.equal((await cli([...args, option, bad])).code, 2, what);
        checked++;
        if (envVar && bad !== '') {
          const r = await cli(args, { [envVar]: bad });
          assertUsageError(r, option, bad, `${envVar}=${JSON.stringify(bad.slice(0, 20))} for ferry ${args[0]}`);
          checked++;
        }
      }
    }
    assert.ok(checked > 90, `${checked} cases`);
    assert.equal(await snapshot(), snapshotBefore, 'no schema or table created or dropped');
  });

  test('security - JetStream names (relay --ensure-stream, doctor --stream and --consumer) refuse subject tokens and injection', async () => {
    for (const bad of HOSTILE_NATS_NAMES) {
      for (const [args, option] of [
        [['doctor', '--database-url', url()], '--stream'],
        [['doctor', '--database-url', url(), '--stream', stream.name], '--consumer'],
      ] as Array<[string[], string]>) {
        const r = await cli([...args, option, bad]);
        if (bad === '') assert.equal(r.code, 2);
        else assertUsageError(r, option, bad, `ferry doctor ${option} ${JSON.stringify(bad.slice(0, 20))}`);
      }
      const r = await cli(['relay', '--database-url', url(), '--http-port', '0', '--ensure-stream', `${bad}=orders.>`]);
      assert.equal(r.code, 2, `relay --ensure-stream ${JSON.stringify(bad.slice(0, 20))}: ${r.err.slice(0, 200)}`);
      assert.match(r.err, /--ensure-stream/);
    }
    const env = await cli(['relay', '--database-url', url(), '--http-port', '0'], { FERRY_ENSURE_STREAM: 'x"; drop=orders.>' });
    assert.equal(env.code, 2, env.err);
    assert.equal(await snapshot(), snapshotBefore);
  });

  test('security - through bin/ferry.js the process exits 2 with one line naming the value', () => {
    const bad = 'x"; drop table t; --';
    for (const [args, env] of [
      [['migrate', '--database-url', url(), '--schema', bad], {}],
      [['relay', '--database-url', url(), '--http-port', '0'], { FERRY_SCHEMA: 'ferrу' }],
    ] as Array<[string[], Record<string, string>]>) {
      const p = spawnSync(process.execPath, [FERRY_BIN, ...args], { env: { ...process.env, ...env }, encoding: 'utf8', timeout: 20_000 });
      assert.equal(p.status, 2, p.stderr);
      const lines = p.stderr.split('\n').filter((l) => l.trim() !== '' && !l.startsWith('(run with --help'));
      assert.equal(lines.length, 1, p.stderr);
      assert.match(lines[0] ?? '', /--schema/);
      assert.ok((lines[0] ?? '').includes(env.FERRY_SCHEMA ?? bad), p.stderr);
    }
  });

  test('security - every API factory refuses hostile schema, consumer and stream names with a ValidationError and no SQL', async () => {
    const calls: Array<[string, () => unknown]> = [];
    for (const bad of HOSTILE_IDENTIFIERS) {
      calls.push(
        [`createPublisher schema ${bad.slice(0, 20)}`, () => createPublisher({ schema: bad, source: 'svc' })],
        [`migrate schema ${bad.slice(0, 20)}`, () => migrate({ pool: db.pool, schema: bad, set: 'outbox' })],
        [`migrate inbox schema ${bad.slice(0, 20)}`, () => migrate({ pool: db.pool, schema: bad, set: 'inbox' })],
        [`createIdempotency schema ${bad.slice(0, 20)}`, () => createIdempotency({ schema: bad })],
        [`createRelay schema ${bad.slice(0, 20)}`, () => createRelay({ databaseUrl: db.url, schema: bad })],
        [
          `createInbox schema ${bad.slice(0, 20)}`,
          () => createInbox({ pool: db.pool, nc: stream.nc, stream: stream.name, consumer: 'c', schema: bad, handlers: {} }),
        ],
        [
          `createInbox consumer ${bad.slice(0, 20)}`,
          () => createInbox({ pool: db.pool, nc: stream.nc, stream: stream.name, consumer: bad, handlers: {} }),
        ],
        [
          `createInbox bossSchema ${bad.slice(0, 20)}`,
          () => createInbox({ pool: db.pool, nc: stream.nc, stream: stream.name, consumer: 'c', bossSchema: bad, handlers: {} }),
        ],
      );
    }
    for (const bad of HOSTILE_NATS_NAMES) {
      calls.push([
        `createInbox stream ${bad.slice(0, 20)}`,
        () => createInbox({ pool: db.pool, nc: stream.nc, stream: bad, consumer: 'c', handlers: {} }),
      ]);
    }
    for (const [what, call] of calls) {
      let error: unknown;
      try {
        await call();
      } catch (err) {
        error = err;
      }
      assert.ok(isValidationError(error), `${what}: ${error instanceof Error ? `${error.name}: ${error.message}` : 'no error'}`);
      assert.ok((error as Error).message.length < 400, `${what}: a short message`);
    }
    assert.equal(await snapshot(), snapshotBefore, 'no schema or table created or dropped');
  });
});
