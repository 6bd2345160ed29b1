/**
 * Resource bounds of the relay: peak RSS (VmHWM from /proc/<pid>/status) of a
 * `ferry relay` child process draining a large backlog, against a private
 * nats-server (max_payload 2 MB, file-backed stream):
 *   - small: 1,000,000 events of ~40 bytes over 10,000 keys;
 *   - large: 2,000 events of 1 MB, with the relay's defaults and with
 *     --max-in-flight/--batch-size sized for large payloads.
 * Rows are generated with INSERT … SELECT generate_series (the publisher's
 * cost is not what is measured). Standalone: prints a table and writes
 * bench/results/relay-memory.json.
 *
 *   node bench/dist/scenarios/relay-memory.js [--small 1000000] [--large 2000] [--large-bytes 1000000]
 */
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { quoteIdentifier } from '@ferry/core';
import { createTestDatabase, NatsServer } from '@ferry/testkit';
import { jetstreamManager, StorageType } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { benchFlags } from '../lib/args.js';

const flags = benchFlags(
  'Peak RSS of a ferry relay child draining a large backlog of small events and one of large events (not part of npm run bench).',
  {
    small: ['<n> small events', 1_000_000],
    large: ['<n> large events', 2_000],
    'large-bytes': ['<n> bytes per large event', 1_000_000],
  },
);
const LARGE_BYTES = flags['large-bytes'];

const FERRY_BIN = fileURLToPath(new URL('../../../apps/relay/bin/ferry.js', import.meta.url));
const RESULT = fileURLToPath(new URL('../../results/relay-memory.json', import.meta.url));

function procKb(pid: number, field: 'VmHWM' | 'VmRSS'): number {
  try {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

interface Measurement {
  scenario: string;
  events: number;
  payloadBytes: number;
  relayFlags: string[];
  drainSeconds: number;
  eventsPerSecond: number;
  peakRssMb: number;
  /** RSS at the end of the drain, before SIGTERM. */
  endRssMb: number;
  /** Peak RSS over the bytes of the whole backlog. */
  peakRssOverBacklog: number;
  exitCode: number | null;
}

async function measure(scenario: string, events: number, payloadBytes: number, flags: string[]): Promise<Measurement> {
  const nats = await NatsServer.start({ config: 'max_payload: 2097152' });
  const db = await createTestDatabase({ prefix: 'bench_mem', lanes: 16, max: 2 });
  const s = quoteIdentifier(db.schema);
  const nc = await connect({ servers: nats.url });
  try {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: 'MEM', subjects: ['mem.>'], storage: StorageType.File, max_msg_size: -1 });
    const chunk = payloadBytes > 10_000 ? 100 : 100_000;
    for (let start = 0; start < events; start += chunk) {
      const n = Math.min(chunk, events - start);
      await db.pool.query(
        `INSERT INTO ${s}.outbox (id, key, version, subject, type, source, content_type, data, headers, occurred_at)
         SELECT gen_random_uuid(), 'k' || (i % 10000), i / 10000 + 1, 'mem.events', 'Bench', 'bench', 'application/octet-stream',
                CASE WHEN $3::int > 64 THEN convert_to(repeat(md5(i::text), $3::int / 32), 'UTF8') ELSE convert_to('{"n":' || i || '}', 'UTF8') END,
                '{}'::jsonb, now()
           FROM generate_series($1::bigint, $2::bigint) AS i`,
        [start, start + n - 1, payloadBytes],
      );
    }
    await db.pool.query(`VACUUM ANALYZE ${s}.outbox, ${s}.outbox_pending, ${s}.outbox_published`);
    const started = performance.now();
    const child = spawn(
      process.execPath,
      [
        FERRY_BIN,
        'relay',
        '--database-url',
        db.url,
        '--schema',
        db.schema,
        '--nats-url',
        nats.url,
        '--no-maintenance',
        '--http-port',
        '0',
        '--log-level',
        'warn',
        ...flags,
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    child.stderr?.on('data', (b: Buffer) => {
      stderr += b.toString();
    });
    const exited = new Promise<number | null>((resolve) => child.once('close', resolve));
    const pid = child.pid as number;
    let pending = events;
    let endRss = 0;
    let peak = 0;
    const deadline = Date.now() + 30 * 60_000;
    while (pending > 0 && Date.now() < deadline && child.exitCode === null) {
      await new Promise((r) => setTimeout(r, 500));
      peak = Math.max(peak, procKb(pid, 'VmHWM'));
      endRss = procKb(pid, 'VmRSS');
      const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${s}.outbox_pending`);
      pending = rows[0]?.n ?? 0;
    }
    const drainSeconds = (performance.now() - started) / 1000;
    peak = Math.max(peak, procKb(pid, 'VmHWM'));
    child.kill('SIGTERM');
    const exitCode = await exited;
    if (pending > 0) throw new Error(`${scenario}: ${pending} events not drained; relay stderr: ${stderr.slice(-1000)}`);
    return {
      scenario,
      events,
      payloadBytes,
      relayFlags: flags,
      drainSeconds: Math.round(drainSeconds * 10) / 10,
      eventsPerSecond: Math.round(events / drainSeconds),
      peakRssMb: Math.round(peak / 102.4) / 10,
      endRssMb: Math.round(endRss / 102.4) / 10,
      peakRssOverBacklog: Math.round(((peak * 1024) / Math.max(1, events * payloadBytes)) * 1000) / 1000,
      exitCode,
    };
  } finally {
    await nc.close();
    await db.close();
    await nats.stop();
  }
}

const results: Measurement[] = [];
if (flags.small > 0) results.push(await measure('small events, defaults', flags.small, 40, []));
if (flags.large > 0) {
  results.push(await measure('1 MB events, defaults', flags.large, LARGE_BYTES, []));
  results.push(
    await measure('1 MB events, --max-in-flight 32 --batch-size 16', flags.large, LARGE_BYTES, [
      '--max-in-flight',
      '32',
      '--batch-size',
      '16',
    ]),
  );
}
const doc = {
  scenario: 'relay-memory',
  measuredAt: new Date().toISOString(),
  machine: { node: process.version, cpus: (await import('node:os')).cpus().length },
  command: `node bench/dist/scenarios/relay-memory.js --small ${flags.small} --large ${flags.large} --large-bytes ${LARGE_BYTES}`,
  results,
};
writeFileSync(RESULT, `${JSON.stringify(doc, null, 2)}\n`);
console.log('scenario | events | payload B | drain s | events/s | peak RSS MB | end RSS MB | exit');
for (const r of results) {
  console.log(
    `${r.scenario} | ${r.events} | ${r.payloadBytes} | ${r.drainSeconds} | ${r.eventsPerSecond} | ${r.peakRssMb} | ${r.endRssMb} | ${r.exitCode}`,
  );
}
console.log(`wrote ${RESULT}`);
