/**
 * One row per trial: `--instances` ferry relay processes (defaults) drain a
 * committed backlog of `--events` events over `--keys` keys, after a warm-up
 * drain of the same size, on a file-storage stream; events/s and the CPU per
 * 1,000 events (ms) of the relays and of their PostgreSQL backends. Each trial
 * truncates the outbox and starts fresh relays on it, so the table's
 * statistics are stale as after a first deploy. A trial far below the others
 * is a stall: this is how the two-relay stall of issue 27 (marks planned over
 * every pending row while the statistics were stale) was found and checked.
 *
 *   node bench/dist/scenarios/drain-trials.js [--instances 2] [--trials 6] [--events 20000] [--keys 1000]
 */
import { quoteIdentifier } from '@ferry/core';
import { createTestDatabase, createTestStream, natsUrl, type TestStream } from '@ferry/testkit';
import { benchFlags, sleep } from '../lib/args.js';
import { commitBacklog } from '../lib/outbox.js';
import { cpuMeter, startRelayProcesses } from '../lib/relay-process.js';
import { writeResult } from '../lib/stats.js';

const flags = benchFlags('Per-trial drains of a backlog by ferry relay processes: stalls show as outliers.', {
  instances: ['<n> relay processes', 2],
  trials: ['<n> trials', 6],
  events: ['<n> events per drain', 20_000],
  keys: ['<n> keys', 1000],
});

const LANES = 16;

const db = await createTestDatabase({ prefix: 'bench_trials', lanes: LANES, max: 4 });
const s = quoteIdentifier(db.schema);
const count = async (stream: TestStream) => (await stream.jsm.streams.info(stream.name)).state.messages;
const trials: Array<{ trial: number; eventsPerSec: number; relayCpuPer1k: number; postgresCpuPer1k: number }> = [];
let run = 0;
try {
  for (let trial = 0; trial < flags.trials; trial++) {
    await db.pool.query(`TRUNCATE ${s}.outbox, ${s}.key_versions`);
    const stream = await createTestStream({ prefix: 'benchtrials', storage: 'file' });
    const relays = await startRelayProcesses(flags.instances, LANES, { databaseUrl: db.url, schema: db.schema, natsUrl: natsUrl() });
    try {
      const drain = async (n: number) => {
        const before = await count(stream);
        const t0 = await commitBacklog(db.pool, db.schema, {
          count: n,
          keys: flags.keys,
          keyPrefix: `t${run++}-`,
          subject: `${stream.prefix}.orders`,
        });
        while ((await count(stream)) < before + n) await sleep(10);
        return (performance.now() - t0) / 1000;
      };
      await drain(flags.events);
      await sleep(200);
      const meter = await cpuMeter(db.pool, relays);
      const seconds = await drain(flags.events);
      const cpu = await meter.stop();
      const row = {
        trial,
        eventsPerSec: Math.round(flags.events / seconds),
        relayCpuPer1k: Math.round((cpu.relaySeconds * 1e7) / flags.events) / 10,
        postgresCpuPer1k: Math.round((cpu.postgresSeconds * 1e7) / flags.events) / 10,
      };
      trials.push(row);
      console.log(JSON.stringify(row));
    } finally {
      await Promise.all(relays.map((r) => r.stop()));
      await stream.close();
    }
  }
  const file = writeResult('drain-trials', {
    scenario: 'drain-trials',
    params: { instances: flags.instances, trials: flags.trials, events: flags.events, keys: flags.keys, lanes: LANES },
    trials,
  });
  console.log(`wrote ${file}`);
} finally {
  await db.close();
}
