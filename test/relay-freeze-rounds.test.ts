// Relays frozen with SIGSTOP in the middle of a preloaded drain, round after round, with a duplicate
// window (1 s) far shorter than the freeze (issue 41: in 4 of 9 such rounds a woken relay wrote 7-38
// publishes queued before the freeze, stored again behind newer versions; since the wire fence, a
// freeze landing between its check and the write call may still let one write out, which the relay
// reports by id: nothing may be stored after the wake that it did not report). And a relay killed outright:
// how long its lanes wait with the default term.
import assert from 'node:assert/strict';
import { after, afterEach, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { quoteIdentifier } from '@ferry/core';
import { RELAY_DEFAULTS } from '@ferry/relay';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import {
  checkStream,
  countPending,
  describeCopies,
  type RelayProcess,
  readStream,
  reportedLate,
  spawnRelay,
  steadyLoad,
  waitsDuring,
} from './relay-helpers.js';

const LANES = 8;
let db: TestDatabase;
let stream: TestStream | undefined;
let procs: RelayProcess[] = [];

before(async () => {
  db = await createTestDatabase({ prefix: 'relay_freeze_rounds', lanes: LANES });
});

afterEach(async () => {
  for (const p of procs) {
    if (p.proc.exitCode === null && p.proc.signalCode === null) {
      p.proc.kill('SIGCONT');
      p.proc.kill('SIGKILL');
    }
  }
  procs = [];
  await stream?.close();
  stream = undefined;
});

after(async () => {
  await db?.close();
});

function relayArgs(extra: string[]): string[] {
  return [
    '--database-url',
    db.url,
    '--schema',
    db.schema,
    '--nats-url',
    (stream as TestStream).nc.getServer(),
    '--no-maintenance',
    '--http-port',
    '0',
    ...extra,
  ];
}

async function holders(): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    `SELECT count(DISTINCT owner)::int AS n FROM ${quoteIdentifier(db.schema)}.relay_leases WHERE owner IS NOT NULL AND expires_at > now()`,
  );
  return rows[0]?.n ?? 0;
}

test('relay freeze rounds - three rounds of a relay SIGSTOPped 2.5 terms in the middle of a drain, 1 s duplicate window: nothing is stored after the wake that the woken relay did not report as written late, and every key keeps its order', async (t) => {
  const TERM_MS = 2000;
  for (let round = 0; round < 3; round++) {
    stream = await createTestStream({ prefix: `freezerounds${round}`, duplicateWindowMs: 1000 });
    const { rows } = await db.pool.query<{ id: string }>(
      `INSERT INTO ${quoteIdentifier(db.schema)}.outbox (id, key, version, subject, type, source, content_type, data, occurred_at)
       SELECT gen_random_uuid(), $1 || (g % 2000), g / 2000 + 1, $2, 'OrderPlaced', 'test', 'application/json', '\\x7b7d', now()
         FROM generate_series(0, 29999) g RETURNING id`,
      [`r${round}-k`, `${stream.prefix}.orders`],
    );
    const ids = rows.map((r) => r.id);
    const timing = ['--poll-interval-ms', '100', '--lease-term-ms', String(TERM_MS), '--batch-size', '100', '--max-in-flight', '400'];
    procs = [spawnRelay(relayArgs(timing)), spawnRelay(relayArgs(timing))];
    await waitFor(async () => (await holders()) === 2, { timeoutMs: 30_000, what: 'two relays holding lanes' });
    await waitFor(async () => (await countPending(db.pool, db.schema)) < 27_000, { timeoutMs: 60_000, what: 'the drain under way' });
    // A different moment of the drain each round.
    await sleep(round * 150);
    const frozen = procs[round % 2] as RelayProcess;
    frozen.proc.kill('SIGSTOP');
    await sleep(2.5 * TERM_MS);
    frozen.proc.kill('SIGCONT');
    const wokeAt = Date.now();
    await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 120_000, what: 'the backlog drained' });
    const events = await readStream(stream.nc, stream.name, 60_000);
    const again = checkStream(events, ids);
    const late = again.filter((c) => c.storedAt >= wokeAt);
    for (const p of procs) p.proc.kill('SIGTERM');
    for (const p of procs) assert.equal((await p.exited).code, 0, p.output().slice(-2000));
    // What the woken relay wrote in the microseconds between its last check and the write call, when the
    // freeze landed there, it reports by id (no client can take bytes back); nothing else may leave.
    const reported = reportedLate(frozen.output());
    const unreported = late.filter((c) => !reported.ids.has(c.id));
    t.diagnostic(
      `round ${round + 1}: ${again.length} ids stored twice (takeover re-sends during the freeze), ${late.length} after the wake, ${reported.ids.size} reported late by the woken relay${reported.reasons.length > 0 ? ` (${reported.reasons.join('; ')})` : ''}`,
    );
    assert.equal(
      unreported.length,
      0,
      `round ${round + 1}, stored again after the wake and not reported late:\n${unreported
        .slice(0, 3)
        .map((c) => describeCopies(events, c.id))
        .join('\n')}`,
    );
    procs = [];
    await stream.close();
    stream = undefined;
  }
});

test('relay freeze rounds - a relay SIGKILLed under load with the default term and poll: its lanes move within 0.8 of the term plus a poll', async (t) => {
  stream = await createTestStream({ prefix: 'crashtakeover' });
  procs = [spawnRelay(relayArgs([])), spawnRelay(relayArgs([]))];
  await waitFor(async () => (await holders()) === 2, { timeoutMs: 30_000, what: 'two relays holding lanes' });
  const traffic = steadyLoad(db.pool, db.schema, stream.prefix, 200);
  await sleep(2000);
  (procs[0] as RelayProcess).proc.kill('SIGKILL');
  const killedAt = Date.now();
  await sleep(RELAY_DEFAULTS.leaseTermMs + 2000);
  const ids = await traffic.stop();
  await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 60_000, what: 'every event published' });
  const w = await waitsDuring(db.pool, db.schema, killedAt, killedAt + RELAY_DEFAULTS.leaseTermMs);
  const bound = 0.8 * RELAY_DEFAULTS.leaseTermMs + RELAY_DEFAULTS.pollIntervalMs;
  t.diagnostic(
    `term ${RELAY_DEFAULTS.leaseTermMs} ms, poll ${RELAY_DEFAULTS.pollIntervalMs} ms: ${w.n} events committed after the kill waited at most ${w.maxMs.toFixed(0)} ms (p99 ${w.p99Ms.toFixed(0)} ms; bound ${bound} ms plus 2 s for a loaded machine)`,
  );
  assert.ok(w.maxMs < bound + 2000, `an event waited ${w.maxMs.toFixed(0)} ms after the kill`);
  const again = checkStream(await readStream(stream.nc, stream.name), ids);
  assert.equal(again.length, 0, 'the 2-minute window drops the takeover re-sends');
  (procs[1] as RelayProcess).proc.kill('SIGTERM');
  assert.equal((await (procs[1] as RelayProcess).exited).code, 0);
});
