// A relay that is alive but frozen (SIGSTOP: a VM pause, a long GC, a blocked event loop) loses its lanes
// within its lease term, and once woken sends nothing of them: the stream's duplicate window (10 s) is
// shorter than the freeze (30 s), so a stale re-send would be stored twice, or after a newer version.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { quoteIdentifier } from '@ferry/core';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import {
  assertNothingStaleAfter,
  countPending,
  type RelayProcess,
  readStream,
  spawnRelay,
  steadyLoad,
  waitsDuring,
} from './relay-helpers.js';

const TERM_MS = 3000;
const POLL_MS = 200;
const FREEZE_MS = 30_000;

let db: TestDatabase;
let stream: TestStream;
const procs: RelayProcess[] = [];

before(async () => {
  db = await createTestDatabase({ prefix: 'relay_freeze', lanes: 16 });
  stream = await createTestStream({ prefix: 'relayfreeze', duplicateWindowMs: 10_000 });
});

after(async () => {
  for (const p of procs) {
    if (p.proc.exitCode === null && p.proc.signalCode === null) {
      p.proc.kill('SIGCONT');
      p.proc.kill('SIGKILL');
    }
  }
  await stream?.close();
  await db?.close();
});

/** Lanes held per owner (unexpired leases). */
async function owners(): Promise<Map<string, number>> {
  const { rows } = await db.pool.query<{ owner: string; n: number }>(
    `SELECT owner, count(*)::int AS n FROM ${quoteIdentifier(db.schema)}.relay_leases WHERE owner IS NOT NULL AND expires_at > now() GROUP BY 1`,
  );
  return new Map(rows.map((r) => [r.owner, r.n]));
}

test('relay freeze - one of two relays SIGSTOPped 30 s under load: the other takes its lanes within the term plus a poll, and the woken one sends nothing stale', async (t) => {
  const args = [
    '--database-url',
    db.url,
    '--schema',
    db.schema,
    '--nats-url',
    stream.nc.getServer(),
    '--no-maintenance',
    '--http-port',
    '0',
  ];
  const timing = ['--poll-interval-ms', String(POLL_MS), '--lease-term-ms', String(TERM_MS), '--batch-size', '100'];
  for (let i = 0; i < 2; i++) procs.push(spawnRelay([...args, ...timing]));
  await waitFor(
    async () => {
      const o = await owners();
      return o.size === 2 && [...o.values()].reduce((a, b) => a + b, 0) === 16;
    },
    { timeoutMs: 20_000, what: 'two relays holding eight lanes each' },
  );
  const [frozen, other] = procs as [RelayProcess, RelayProcess];
  const frozenId = /"instance":"([0-9a-f]+)"/.exec(frozen.output())?.[1];
  assert.ok(frozenId, 'the frozen relay logged its instance id');

  const traffic = steadyLoad(db.pool, db.schema, stream.prefix, 200);
  await sleep(3000);
  frozen.proc.kill('SIGSTOP');
  const frozenAt = Date.now();
  await sleep(FREEZE_MS);
  const wokenAt = Date.now();
  frozen.proc.kill('SIGCONT');
  t.diagnostic(`frozen ${new Date(frozenAt).toISOString()}, woken ${new Date(wokenAt).toISOString()}`);
  await sleep(5000);
  const ids = await traffic.stop();
  await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 60_000, what: 'every event published' });

  const w = await waitsDuring(db.pool, db.schema, frozenAt, frozenAt + FREEZE_MS);
  t.diagnostic(`${w.n} events committed during the freeze: longest wait ${w.maxMs.toFixed(0)} ms, p99 ${w.p99Ms.toFixed(0)} ms`);
  // Bound: the term plus a poll, plus the claim and send (a loaded 2-core box gets 2 s).
  assert.ok(w.maxMs < TERM_MS + POLL_MS + 2000, `an event waited ${w.maxMs} ms`);

  const events = await readStream(stream.nc, stream.name);
  t.diagnostic(`${ids.length} events committed, ${events.length} in the stream`);
  assertNothingStaleAfter(events, ids, wokenAt);
  assert.match(other.output(), new RegExp(`lease taken: lane \\d+ epoch \\d+ from ${frozenId}`), 'the live relay took over');
  assert.match(frozen.output(), /lease lost/, 'the woken relay saw its leases lost');

  for (const p of procs) p.proc.kill('SIGTERM');
  for (const p of procs) assert.equal((await p.exited).code, 0, p.output().slice(-2000));
});
