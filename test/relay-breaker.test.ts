// Issue 28: rows on subjects no stream binds get "no responders" from a JetStream that is up. They
// back off per key and must never open the NATS circuit, however many keys on however many such
// subjects fail at once: the healthy keys keep their latency. Before the fix, the first rows of
// three keys on each of two unbound subjects opened the circuit 5 times in 20 s and took healthy
// latency from p50 2 ms to p50 2.6 s.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { quoteIdentifier, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createRelay, type Relay } from '@ferry/relay';
import { createTestDatabase, createTestStream, natsUrl, type TestDatabase, type TestStream } from '@ferry/testkit';

const PHASE_MS = Number(process.env.FERRY_TEST_BREAKER_PHASE_MS ?? 7_000);
const RATE = 50; // healthy events a second

describe('relay NATS circuit with rows on unbound subjects', () => {
  let db: TestDatabase;
  let stream: TestStream;
  let relay: Relay | undefined;

  before(async () => {
    db = await createTestDatabase({ prefix: 'breaker' });
    stream = await createTestStream({ prefix: 'breaker' });
  });

  after(async () => {
    await relay?.stop();
    await stream?.close();
    await db?.close();
  });

  /** Healthy events at RATE a second for PHASE_MS while `bad` subjects get new keys' first rows every 2 s; returns commit-to-delivery latencies. */
  async function phase(name: string, badSubjects: number): Promise<{ latencies: number[]; badIds: string[] }> {
    const publisher = createPublisher({ schema: db.schema, source: 'breaker-test' });
    const committedAt = new Map<string, number>();
    const arrivedAt = new Map<string, number>();
    const sub = stream.nc.subscribe(`${stream.prefix}.${name}.>`, {
      callback: (_err, msg) => {
        arrivedAt.set(msg.headers?.get('Nats-Msg-Id') ?? '', performance.now());
      },
    });
    const badIds: string[] = [];
    const bad = async (round: number) => {
      if (badSubjects === 0) return;
      // The first row of three new keys on each unbound subject, all in one transaction: one claim, failing chains side by side.
      const rows = Array.from({ length: badSubjects * 3 }, (_, i) => ({
        subject: `${stream.prefix}_nobody_${name}_${i % badSubjects}.e`,
        key: `bad-${name}-${round}-${i}`,
        type: 'T',
        data: { round },
      }));
      const results = await withTransaction(db.pool, (tx) => publisher.publishMany(tx, rows));
      badIds.push(...results.map((r) => r.id));
    };
    const inflight = new Set<Promise<void>>();
    const started = performance.now();
    let n = 0;
    let round = 0;
    while (performance.now() - started < PHASE_MS) {
      if (performance.now() - started >= 500 + 2_000 * round) await bad(round++);
      // Not awaited: one transaction an event on a schedule, so a slow commit does not lower the rate.
      const k = n;
      inflight.add(
        withTransaction(db.pool, (tx) =>
          publisher.publish(tx, { subject: `${stream.prefix}.${name}.orders`, key: `ok-${k % 20}`, type: 'T', data: { n: k } }),
        ).then((r) => {
          committedAt.set(r.id, performance.now());
        }),
      );
      n++;
      await sleep(Math.max(0, started + (n * 1000) / RATE - performance.now()));
    }
    await Promise.all(inflight);
    const deadline = performance.now() + 20_000;
    const delivered = () => [...committedAt.keys()].filter((id) => arrivedAt.has(id)).length;
    while (delivered() < n && performance.now() < deadline) await sleep(50);
    sub.unsubscribe();
    assert.equal(delivered(), n, `${name}: every healthy event delivered (${delivered()} of ${n})`);
    // An event can arrive before its publisher saw the COMMIT answer: 0 ms then.
    const latencies = [...committedAt].map(([id, at]) => Math.max(0, (arrivedAt.get(id) ?? Number.NaN) - at));
    return { latencies, badIds };
  }

  const pct = (xs: number[], p: number) => {
    const s = [...xs].sort((a, b) => a - b);
    return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? Number.NaN;
  };

  test('relay - first rows of keys on 2 and on 10 unbound subjects never open the circuit; healthy p50 stays under 50 ms at 50 events/s (or twice a loaded baseline)', async (t) => {
    const circuit: string[] = [];
    // Default options, as the issue ran it (threshold 5, cool-down 5 s, backoff from 500 ms).
    relay = createRelay({ databaseUrl: db.url, schema: db.schema, nats: { servers: natsUrl() }, maintenance: false });
    relay.on('relay:circuit', (e) => circuit.push(e.state));
    await relay.start();
    // The same load with no bad rows first: on a loaded machine the publishing itself is slow, and the
    // bound below is 50 ms or, when the machine cannot do 50 ms with nothing failing, twice that baseline
    // plus 25 ms. Before the fix the circuit's 5 s cool-downs put p50 in seconds either way.
    const baseline = pct((await phase('s0', 0)).latencies, 50);
    t.diagnostic(`no unbound subjects: healthy p50 ${baseline.toFixed(1)} ms`);
    const limit = Math.max(50, 2 * baseline + 25);
    for (const subjects of [2, 10]) {
      const { latencies, badIds } = await phase(`s${subjects}`, subjects);
      const p50 = pct(latencies, 50);
      const p99 = pct(latencies, 99);
      t.diagnostic(
        `${subjects} unbound subjects, ${badIds.length} bad keys: healthy p50 ${p50.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms over ${latencies.length} events`,
      );
      const { rows } = await db.pool.query<{ tried: number }>(
        `SELECT count(*)::int AS tried FROM ${quoteIdentifier(db.schema)}.outbox_events WHERE id = ANY($1) AND attempts >= 1 AND published_at IS NULL`,
        [badIds],
      );
      assert.equal(rows[0]?.tried, badIds.length, 'every bad row was tried and failed');
      assert.deepEqual(circuit, [], `the circuit stayed closed with ${subjects} unbound subjects`);
      assert.ok(p50 < limit, `healthy p50 ${p50.toFixed(1)} ms with ${subjects} unbound subjects (limit ${limit.toFixed(1)} ms)`);
    }
    assert.match(await relay.metrics(), /ferry_circuit_state 0/);
  });
});
