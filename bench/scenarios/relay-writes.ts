/**
 * How many socket writes `ferry relay` (a process, its defaults) makes per
 * event: to NATS (its messages go out in as many writes as its chains
 * continue from PubAcks) and to PostgreSQL, counted in the process by
 * bench/lib/count-writes-hook.ts, while it drains a backlog of `--events`
 * ~200-byte events over each key spread. With few keys the relay has few
 * messages to write at once: one PubAck round trip per event and key is
 * what keeps a key's order on NATS 2.9 (docs/relay.md).
 *
 *   node bench/dist/scenarios/relay-writes.js [--events 60000] [--keys 10,1000]
 */
import { readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { quoteIdentifier } from '@ferry/core';
import { createTestDatabase, createTestStream, databaseUrl, natsUrl } from '@ferry/testkit';
import { declareFlags, listArg, numArg, until } from '../lib/args.js';
import { generateRows } from '../lib/outbox.js';
import { startRelayProcess } from '../lib/relay-process.js';
import { printTable, writeResult } from '../lib/stats.js';

declareFlags(
  'node bench/dist/scenarios/relay-writes.js',
  'Socket writes of ferry relay per event, to NATS and to PostgreSQL, by key spread (not part of npm run bench).',
  {
    events: '<n> events per drain (default 60000)',
    keys: '<n,n,…> key spreads (default 10,1000)',
  },
);

const EVENTS = numArg('events', 60_000);
const SPREADS = listArg('keys', [10, 1000]);
const HOOK = fileURLToPath(new URL('../lib/count-writes-hook.js', import.meta.url));
const PG_PORT = Number(new URL(databaseUrl()).port || 5432);
const NATS_PORT = Number(new URL(natsUrl().replace(/^nats:/, 'http:')).port || 4222);

const cells: Array<{ keys: number; natsWrites: number; natsMessagesPerWrite: number; pgWrites: number; seconds: number }> = [];
for (const keys of SPREADS) {
  const db = await createTestDatabase({ prefix: 'bench_writes', lanes: 16 });
  const stream = await createTestStream({ prefix: 'benchwrites', storage: 'file' });
  const file = join(tmpdir(), `ferry-writes-${process.pid}-${keys}.json`);
  try {
    await generateRows(db.pool, db.schema, { count: EVENTS, keys, keyPrefix: 'k', subject: `${stream.prefix}.orders` });
    const started = performance.now();
    const relay = await startRelayProcess({
      databaseUrl: db.url,
      schema: db.schema,
      natsUrl: natsUrl(),
      nodeArgs: ['--import', HOOK],
      env: { FERRY_BENCH_WRITES_FILE: file },
    });
    const s = quoteIdentifier(db.schema);
    await until(async () => {
      const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${s}.outbox_pending`);
      return rows[0]?.n === 0;
    }, 'the relay to drain the backlog');
    const seconds = (performance.now() - started) / 1000;
    await relay.stop();
    const counts = JSON.parse(readFileSync(file, 'utf8')) as Record<string, { writes: number; bytes: number }>;
    const natsWrites = counts[String(NATS_PORT)]?.writes ?? 0;
    const pgWrites = counts[String(PG_PORT)]?.writes ?? 0;
    cells.push({ keys, natsWrites, natsMessagesPerWrite: EVENTS / natsWrites, pgWrites, seconds });
  } finally {
    rmSync(file, { force: true });
    await stream.close();
    await db.close();
  }
}
printTable(
  `Socket writes of ferry relay draining ${EVENTS} events (its defaults, file storage)`,
  ['keys', 'writes to NATS', 'messages per write', 'writes to PostgreSQL', 'drain, s'],
  cells.map((c) => [String(c.keys), c.natsWrites, c.natsMessagesPerWrite.toFixed(1), c.pgWrites, c.seconds.toFixed(1)]),
);
writeResult('relay-writes', { params: { events: EVENTS, keys: SPREADS }, cells });
