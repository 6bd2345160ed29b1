// Issue 42 item 5: FERRY_DATABASE_URL='postgres://u@h/db?password=Qs3kr#3tValue' printed
// `?password=***#3tValue` in the `ferry relay starting` line. The real `ferry` CLI, every command
// once (the relay at trace, debug and info, the console), with URLs that carry the characters a
// URL parser cuts at (# ? & / @ % +) and spaces in the password, the secret query value, the
// fragment and the NATS password and token, and that still work (the local PostgreSQL trusts, the
// test's nats-server asks for no credentials), so each command gets as far as printing its own
// line. No piece of any secret may appear in stdout or stderr, raw, encoded or in part.
// apps/relay/src/redact-shapes.test.ts runs the full generated matrix of shapes through the
// redactor and the logger at every level; this file proves the commands use them.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { quoteIdentifier } from '@ferry/core';
import { createTestDatabase, NatsServer, type TestDatabase } from '@ferry/testkit';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { setFailed } from './delivery-state.js';
import { FERRY_BIN, publishEvents } from './relay-helpers.js';

/** Secret pieces: each a marker found nowhere else, so any appearance is a leak. */
const piece = (n: number) => `Zs${n}Kv${n * 7}Qx`;
const P = [1, 2, 3, 4, 5].map(piece); // the password of the database URL's userinfo
const Q = [11, 12, 13, 14, 15, 16, 17, 18].map(piece); // ?password= and the fragment after it
const R = [21, 22, 23, 24].map(piece); // ?password= with an @ in it and in the fragment
const N = [31, 32, 33, 34, 35, 36, 37, 38].map(piece); // the NATS URL's password
const T = [41, 42, 43].map(piece); // a NATS token in the URL
const PIECES = [...P, ...Q, ...R, ...N, ...T];

interface Run {
  code: number | null;
  /** Ended by the time bound (SIGKILL), not by itself or the SIGTERM it was sent. */
  timedOut: boolean;
  out: string;
}

/**
 * Runs `ferry args` with `env`; with `until`, stops it (SIGTERM) once its output matches, as an
 * operator's Ctrl-C would, so a daemon's drain lines are checked too.
 */
function ferry(args: string[], env: Record<string, string>, until?: RegExp, timeoutMs = 30_000): Promise<Run> {
  const clean = { ...process.env };
  for (const k of Object.keys(clean)) if (k.startsWith('FERRY_') || k === 'DATABASE_URL') delete clean[k];
  const proc = spawn(process.execPath, [FERRY_BIN, ...args], { env: { ...clean, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let signalled = false;
  const onData = (b: Buffer) => {
    out += b.toString();
    if (until && !signalled && until.test(out)) {
      signalled = true;
      proc.kill('SIGTERM');
    }
  };
  proc.stdout.on('data', onData);
  proc.stderr.on('data', onData);
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    proc.kill('SIGKILL');
  }, timeoutMs);
  return new Promise((resolve) =>
    proc.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, timedOut, out });
    }),
  );
}

describe('every command masks the whole secret of every URL shape', () => {
  let db: TestDatabase;
  let server: NatsServer;
  let dbUrl: string;
  let dbUrlAt: string;
  let natsUrl: string;
  let natsTokenUrl: string;
  let dead: string[];
  const stream = 'SECSHAPES';

  before(async () => {
    db = await createTestDatabase({ prefix: 'sec_shapes', migrate: ['outbox', 'inbox'], lanes: 2 });
    server = await NatsServer.start();
    const nc = await connect({ servers: server.url });
    try {
      await (await jetstreamManager(nc)).streams.add({ name: stream, subjects: ['secshapes.>'] });
    } finally {
      await nc.close();
    }
    const base = new URL(db.url);
    const where = `${base.host}${base.pathname}`;
    // A password with & + @ a space and a stray %; ?password= whose value runs on through a
    // fragment holding ? & / % + and a space (node-postgres reads only Q[0]; the server trusts).
    dbUrl = `postgres://${base.username}:${P[0]}&${P[1]}+${P[2]}@${P[3]} ${P[4]}%zz@${where}?sslmode=disable&password=${Q[0]}#${Q[1]}?${Q[2]}&${Q[3]}/${Q[4]}%${Q[5]}+${Q[6]} ${Q[7]}`;
    // An @ inside the query value and the fragment (the split at the last @ then over-masks: fine).
    dbUrlAt = `postgres://${base.username}@${where}?password=${R[0]}@${R[1]}#${R[2]}@${R[3]}`;
    natsUrl = `nats://nuser:${N[0]}#${N[1]}?${N[2]}/${N[3]}@${N[4]}&${N[5]}+${N[6]}%zz ${N[7]}@127.0.0.1:${server.port}`;
    natsTokenUrl = `nats://${T[0]}#${T[1]}/${T[2]}@127.0.0.1:${server.port}`;
    await publishEvents(db.pool, db.schema, 'secshapes.orders', 4, { keys: 4 });
    const ids = await db.pool.query<{ id: string }>(`SELECT id::text FROM ${quoteIdentifier(db.schema)}.outbox ORDER BY seq LIMIT 3`);
    dead = ids.rows.map((r) => r.id);
    assert.equal(await setFailed(db.pool, db.schema, 'o.id = ANY ($1::uuid[])', [dead], { attempts: 5, lastError: 'boom', dead: true }), 3);
  });

  after(async () => {
    await server?.stop();
    await db?.close();
  });

  test('security - each command and the relay’s starting line print no piece of a secret from any URL shape', async () => {
    const schema = ['--schema', db.schema];
    const env = { FERRY_DATABASE_URL: dbUrl };
    const withNats = { ...env, FERRY_NATS_URL: natsUrl };
    const relayArgs = ['relay', ...schema, '--http-port', '0', '--no-maintenance', '--poll-interval-ms', '50'];
    // Each run names the line it must print: a command that exits before it used its URL proves nothing.
    const runs: Array<[string, string[], Record<string, string>, RegExp, RegExp?]> = [
      ['migrate (flag)', ['migrate', '--database-url', dbUrl, ...schema], {}, /outbox schema ".+" is current/],
      ['migrate --inbox', ['migrate', '--inbox', ...schema], env, /inbox schema ".+" is current/],
      ['migrate --dry-run --json', ['migrate', '--dry-run', '--json', ...schema], env, /"wouldApply":\[\]/],
      ['status', ['status', ...schema], env, /dead/i],
      ['status --json (flag)', ['status', '--database-url', dbUrl, '--json', ...schema], {}, /"pending"/],
      ['status --json, an @ in the query and fragment', ['status', '--json', ...schema], { FERRY_DATABASE_URL: dbUrlAt }, /"pending"/],
      ['dlq list --json', ['dlq', 'list', '--json', ...schema], env, /"last_error":"boom"/],
      ['dlq show --json', ['dlq', 'show', dead[2] as string, '--json', ...schema], env, /"lastError":"boom"/],
      ['dlq retry', ['dlq', 'retry', dead[0] as string, '--yes', ...schema], env, /retried [0-9a-f-]{36}/],
      [
        'dlq discard (flag)',
        ['dlq', 'discard', dead[1] as string, '--yes', '--database-url', dbUrl, ...schema],
        {},
        /discarded [0-9a-f-]{36}/,
      ],
      ['inbox parked list', ['inbox', 'parked', 'list', ...schema, '--boss-schema', `${db.schema}_nope`], env, /pg-boss/],
      [
        'doctor --json',
        ['doctor', '--json', ...schema, '--stream', stream],
        withNats,
        /"check":"subjects","status":"ok","message":"all 1 outbox subjects are in a stream \(SECSHAPES\)"/,
      ],
      [
        'doctor, a token in the NATS URL (flag)',
        ['doctor', ...schema, '--nats-url', natsTokenUrl],
        env,
        /nats: reachable at 127\.0\.0\.1:\d+ \(nats-server/,
      ],
      ['replay --json', ['replay', ...schema, '--from-seq', '1', '--json', '--yes'], withNats, /"replayed":\d+/],
      ['verify', ['verify', ...schema, '--subject', 'secshapes.canary', '--timeout', '5s'], withNats, /canary/i],
      [
        'relay --log-level trace',
        [...relayArgs, '--log-level', 'trace'],
        withNats,
        /"database":"postgres:\/\/[^"]*:\*\*\*@[^"]*password=\*\*\*".*"nats":\["nats:\/\/nuser:\*\*\*@127\.0\.0\.1:\d+"\].*ferry relay starting/,
        /relay running/,
      ],
      [
        'relay --log-level debug (flags)',
        [...relayArgs, '--log-level', 'debug', '--database-url', dbUrl, '--nats-url', natsTokenUrl],
        {},
        /"nats":\["nats:\/\/\*\*\*@127\.0\.0\.1:\d+"\].*ferry relay starting/,
        /relay running/,
      ],
      [
        'relay --log-level info, an @ in the query and fragment',
        [...relayArgs, '--log-level', 'info'],
        { FERRY_DATABASE_URL: dbUrlAt, FERRY_NATS_URL: natsUrl },
        /"database":"postgres:[^"]*password=\*\*\*".*ferry relay starting/,
        /relay running/,
      ],
      ['console', ['console', ...schema, '--port', '0'], withNats, /ferry console on http:\/\/127\.0\.0\.1:\d+/, /ferry console on/],
    ];
    const results: Run[] = new Array(runs.length);
    let next = 0;
    // Four at a time: a dozen node processes at once on a shared 2-core machine hit the time bound.
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        while (next < runs.length) {
          const i = next++;
          const [, args, runEnv, , until] = runs[i] as (typeof runs)[number];
          results[i] = await ferry(args, runEnv, until);
        }
      }),
    );
    const problems: string[] = [];
    for (const [i, r] of results.entries()) {
      const [name, , , expected] = runs[i] as (typeof runs)[number];
      const leaked = PIECES.filter((p) => r.out.includes(p));
      if (leaked.length > 0) {
        const lines = r.out.split('\n').filter((l) => leaked.some((p) => l.includes(p)));
        problems.push(`ferry ${name}: ${leaked.join(', ')} in\n${lines.join('\n').slice(0, 1500)}`);
      }
      if (r.timedOut) problems.push(`ferry ${name} ended by the time bound:\n${r.out.slice(-800)}`);
      else if (!expected.test(r.out)) problems.push(`ferry ${name} did not print ${expected} (exit ${r.code}):\n${r.out.slice(-1200)}`);
    }
    assert.deepEqual(problems, [], problems.join('\n\n'));
  });
});
