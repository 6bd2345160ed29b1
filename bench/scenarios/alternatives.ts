/**
 * Scenario 5, the alternatives a user would pick instead, same run, same
 * events (N events over 10 and over 1,000 keys, 8 writers, one event per
 * business transaction), every one publishing to a file-storage JetStream
 * stream with the same encoding (ce-* headers, Nats-Msg-Id = the event id):
 * - ferry: `publisher.publish` in the business transaction, drained by the relay;
 * - pg-boss as the outbox: `boss.send` in the business transaction (pg-boss's
 *   `db` adapter on the caller's client) to a `key_strict_fifo` queue keyed by
 *   the event key, a pg-boss worker (batches of 100, burst fetching) publishing
 *   each job to JetStream and completing it after the PubAck;
 * - pg-transactional-outbox (the closest TypeScript peer): its
 *   `initializeMessageStorage` in the business transaction with
 *   segment = the event key and concurrency 'sequential' (its per-key order:
 *   its polling function hands out only the oldest unprocessed message of a
 *   segment), drained by its polling listener (`initializePollingMessageListener`,
 *   batches of 100, 100 ms polling interval; its defaults are 5 and 500 ms)
 *   whose handler publishes to JetStream and returns after the PubAck;
 * - a naive relay on the same outbox: claim one row (its pending row FOR
 *   UPDATE SKIP LOCKED, the event row joined), publish, await the PubAck,
 *   mark it (the pending row deleted, a published row inserted, as Ferry's
 *   relay marks since outbox migration 000015), commit; one at a time (1,000
 *   keys only).
 * Drain throughput is the steady rate: from a tenth of the events handed over
 * to the last (a cold start — connections, JIT, the first JetStream request —
 * counts against no one). After each drain the whole stream is read back and
 * every event id counted: lost (never arrived) and duplicated (arrived more
 * than once) are reported, not hidden. Producer transactions per second are
 * reported too. Trials interleaved, order rotating.
 */
import { randomInt } from 'node:crypto';
import { encodeEvent, eventFromOutboxRow, quoteIdentifier, WIRE_HEADERS, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createTestDatabase, createTestStream, natsUrl, type TestStream } from '@ferry/testkit';
import { jetstream } from '@nats-io/jetstream';
import { headers } from '@nats-io/transport-node';
import type pg from 'pg';
import type { ClientConfig } from 'pg';
import { PgBoss } from 'pg-boss';
import { DatabaseSetup, getDisabledLogger, initializeMessageStorage, initializePollingMessageListener } from 'pg-transactional-outbox';
import { benchFlags } from '../lib/args.js';
import { outboxTables, publishPendingSql, startRelay } from '../lib/outbox.js';
import { printTable, type Summary, summarize, writeResult } from '../lib/stats.js';

const flags = benchFlags(
  'Ferry against the alternatives (pg-boss key_strict_fifo, pg-transactional-outbox segments, a naive relay): drain rate, producer rate, lost and duplicated events.',
  {
    quick: 'a small run (300 events, 50 below 100 keys, 1 trial)',
    events: ['<n> events per drain', 6000, 300],
    keys: ['<n,n,…> key spreads', [10, 1000]],
    'naive-events': ['<n> rows the naive relay drains', 1000, 100],
    approaches: ['<a,b,…> which of ferry,pgboss,pto to run (default all; ratios need ferry)', ''],
    'few-key-events': ['<n> events per drain at fewer than 100 keys', 1000, 50],
    trials: ['<n> interleaved trials', 3, 1],
  },
);

/** The naive relay drains only the first rows of the same backlog: one row per round trip, its rate does not depend on the backlog size. */
const NAIVE_EVENTS = Math.min(flags.events, flags['naive-events']);
/**
 * Events per drain with fewer than 100 keys: pg-boss's key_strict_fifo hands a
 * key's next job out only on its next poll (about 25 ev/s at 10 keys), so the
 * full backlog would take minutes per trial; every approach drains this many there.
 */
const FEW_KEY_EVENTS = Math.min(flags.events, flags['few-key-events']);
const eventsFor = (keys: number) => (keys < 100 ? FEW_KEY_EVENTS : flags.events);
const WRITERS = 8;
/** A drain that moves no event for this long has failed (and says so) instead of hanging the run. */
const STALL_MS = 60_000;
const ACCOUNTS = 10_000;

const db = await createTestDatabase({ prefix: 'bench_alt', lanes: 16, max: WRITERS + 4 });
const s = quoteIdentifier(db.schema);
const bossSchema = `${db.schema}_boss`;
const ptoSchema = `${db.schema}_pto`;
const publisher = createPublisher({ schema: db.schema, source: 'bench' });
const boss = new PgBoss({ connectionString: db.url, schema: bossSchema, max: 6, schedule: false, supervise: false });
boss.on('error', (err) => console.error('pg-boss:', err));

interface JobEvent {
  id: string;
  key: string;
  version: number;
  subject: string;
  type: string;
  data: unknown;
}

const payload = (i: number) => ({ order: i, amount: 4200, currency: 'EUR', lines: [{ sku: 'A-1', qty: 2 }] });

/** WRITERS loops of business transactions until `count` are written; transactions per second. */
async function produce(count: number, step: (c: pg.PoolClient, i: number) => Promise<void>): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: WRITERS }, async () => {
      const c = await db.pool.connect();
      try {
        for (let i = next++; i < count; i = next++) {
          await c.query('BEGIN');
          await c.query(`UPDATE ${s}.accounts SET balance = balance + 1 WHERE id = $1`, [randomInt(1, ACCOUNTS + 1)]);
          await step(c, i);
          await c.query('COMMIT');
        }
      } finally {
        c.release();
      }
    }),
  );
  return count / ((performance.now() - started) / 1000);
}

/**
 * Steady drain rate: events per second from the moment a tenth of `total` is
 * done to the last one, so that a cold start (first connections, JIT, the
 * first JetStream request) counts against no one. When all of it is done at
 * the first look, the rate is taken from `startedAt` (when the drain could begin).
 */
async function steadyRate(done: () => number, total: number, startedAt = performance.now()): Promise<number> {
  const t0 = startedAt;
  let t1 = 0;
  let c1 = 0;
  let last = -1;
  let lastMoved = t0;
  for (;;) {
    const c = done();
    const now = performance.now();
    if (c !== last) {
      last = c;
      lastMoved = now;
    } else if (now - lastMoved > STALL_MS) {
      // Counted, not thrown: what never arrives is reported as lost by delivery(), beside the rate until it stalled.
      console.log(`  the drain stalled at ${c} of ${total} events for ${STALL_MS / 1000} s; the rest count as lost`);
      return c1 > 0 && lastMoved > t1 ? (c - c1) / ((lastMoved - t1) / 1000) : c / ((lastMoved - t0) / 1000);
    }
    if (t1 === 0 && c >= total / 10) {
      t1 = now;
      c1 = c;
    }
    if (c >= total) {
      // All of it in one step (a single batch): the rate from the start is all there is.
      if (c1 >= total || now - t1 < 1) return total / ((now - t0) / 1000);
      return (total - c1) / ((now - t1) / 1000);
    }
    await new Promise((r) => setTimeout(r, 2));
  }
}

/**
 * Reads the whole stream back: how many of the `expected` event ids arrived
 * (lost = never), and how many messages were extra copies of one (duplicated).
 */
async function delivery(stream: TestStream, expected: number): Promise<{ messages: number; lost: number; duplicated: number }> {
  const consumer = await jetstream(stream.nc).consumers.get(stream.name);
  const messages = (await stream.jsm.streams.info(stream.name)).state.messages;
  const seen = new Map<string, number>();
  if (messages > 0) {
    const iter = await consumer.fetch({ max_messages: messages, expires: 10_000 });
    let n = 0;
    for await (const m of iter) {
      const id = m.headers?.get(WIRE_HEADERS.id) ?? '';
      seen.set(id, (seen.get(id) ?? 0) + 1);
      if (++n >= messages) break;
    }
  }
  let duplicated = 0;
  for (const c of seen.values()) duplicated += c - 1;
  return { messages, lost: Math.max(0, expected - seen.size), duplicated };
}

/** Publishes an event encoded as the relay does (ce-* headers, Nats-Msg-Id = id). */
async function publishEvent(js: ReturnType<typeof jetstream>, e: JobEvent): Promise<void> {
  const enc = encodeEvent({
    id: e.id,
    key: e.key,
    version: BigInt(e.version),
    subject: e.subject,
    type: e.type,
    source: 'bench',
    time: new Date(),
    contentType: 'application/json',
    data: Buffer.from(JSON.stringify(e.data)),
    headers: {},
  });
  const h = headers();
  for (const [k, v] of enc.headers) h.set(k, v);
  await js.publish(enc.subject, enc.body, { headers: h });
}

/** The events the alternatives carry themselves (ferry's publisher assigns versions; they must be told). */
function jobEvents(stream: TestStream, keys: number): (i: number) => JobEvent {
  const versions = new Map<string, number>();
  return (i) => {
    const key = `order-${i % keys}`;
    const version = (versions.get(key) ?? 0) + 1;
    versions.set(key, version);
    return { id: crypto.randomUUID(), key, version, subject: `${stream.prefix}.orders`, type: 'OrderPlaced', data: payload(i) };
  };
}

interface Trial {
  producerTxPerSec: number;
  drainPerSec: number;
}

async function trialFerry(stream: TestStream, keys: number): Promise<Trial> {
  await db.pool.query(`TRUNCATE ${s}.outbox, ${s}.key_versions`);
  const producerTxPerSec = await produce(eventsFor(keys), async (c, i) => {
    await publisher.publish(c, { subject: `${stream.prefix}.orders`, key: `order-${i % keys}`, type: 'OrderPlaced', data: payload(i) });
  });
  await db.pool.query(`VACUUM ANALYZE ${outboxTables(s)}`);
  // Timed from before the start: a small backlog can be drained before startRelay returns, and the
  // rate must then cover the start, not the few milliseconds after it (run 3 reported 143,000 ev/s).
  const startedAt = performance.now();
  const { relay, marked } = await startRelay({ databaseUrl: db.url, schema: db.schema, nats: { servers: natsUrl() } });
  const drainPerSec = await steadyRate(marked, eventsFor(keys), startedAt);
  await relay.stop();
  return { producerTxPerSec, drainPerSec };
}

/** The naive relay over the outbox ferry just drained (reset to unpublished, new stream). */
async function trialNaive(stream: TestStream): Promise<number> {
  // Every row pending again (outbox migration 000015: its published row deleted, a pending row inserted), to the new stream.
  await withTransaction(db.pool, async (tx) => {
    await tx.query(`UPDATE ${s}.outbox SET subject = $1 || '.orders'`, [stream.prefix]);
    await tx.query(
      `WITH back AS (DELETE FROM ${s}.outbox_published d RETURNING d.seq)
       INSERT INTO ${s}.outbox_pending (seq, lane, key) SELECT o.seq, o.lane, o.key FROM back JOIN ${s}.outbox o ON o.seq = back.seq`,
    );
  });
  await db.pool.query(`VACUUM ANALYZE ${outboxTables(s)}`);
  const js = jetstream(stream.nc);
  const c = await db.pool.connect();
  let n = 0;
  const rate = steadyRate(() => n, NAIVE_EVENTS);
  try {
    while (n < NAIVE_EVENTS) {
      await c.query('BEGIN');
      const { rows } = await c.query(
        `SELECT o.seq, o.id::text, o.key, o.version::text, o.subject, o.type, o.source, o.content_type, o.data, o.headers, o.occurred_at
           FROM ${s}.outbox_pending p JOIN ${s}.outbox o ON o.seq = p.seq ORDER BY p.seq LIMIT 1 FOR UPDATE OF p SKIP LOCKED`,
      );
      const r = rows[0];
      if (!r) {
        await c.query('COMMIT');
        break;
      }
      const enc = encodeEvent(eventFromOutboxRow(r));
      const h = headers();
      for (const [k, v] of enc.headers) h.set(k, v);
      await js.publish(enc.subject, enc.body, { headers: h });
      await c.query(publishPendingSql(s, 'p.seq = $1'), [r.seq]);
      await c.query('COMMIT');
      n++;
    }
  } finally {
    c.release();
  }
  if (n !== NAIVE_EVENTS) throw new Error(`naive relay published ${n} of ${NAIVE_EVENTS}`);
  return await rate;
}

let queues = 0;
async function trialPgBoss(stream: TestStream, keys: number): Promise<Trial> {
  const queue = `outbox-${queues++}`;
  await boss.createQueue(queue, { policy: 'key_strict_fifo' });
  const next = jobEvents(stream, keys);
  const producerTxPerSec = await produce(eventsFor(keys), async (c, i) => {
    const job = next(i);
    await boss.send(queue, job, { singletonKey: job.key, db: { executeSql: (text, values) => c.query(text, values) } });
  });
  const js = jetstream(stream.nc);
  let done = 0;
  const rate = steadyRate(() => done, eventsFor(keys));
  await boss.work<JobEvent>(
    queue,
    { batchSize: 100, localConcurrency: 2, pollingIntervalSeconds: 0.5, burstWhenBatchFull: true },
    async (jobs) => {
      await Promise.all(jobs.map((job) => publishEvent(js, job.data)));
      done += jobs.length;
    },
  );
  const drainPerSec = await rate;
  await boss.offWork(queue);
  await boss.deleteQueue(queue);
  return { producerTxPerSec, drainPerSec };
}

/** pg-transactional-outbox's logger: silent but for errors, which would otherwise hide a stalled drain. */
const ptoErrors = new Set<string>();
const ptoError = (err: unknown, ...rest: unknown[]) => {
  const text = `${err instanceof Error ? err.message : String(err)} ${rest.join(' ')}`;
  if (!ptoErrors.has(text)) console.error(`pg-transactional-outbox: ${text}`); // each distinct error once
  ptoErrors.add(text);
};
const ptoLogger = { ...getDisabledLogger(), error: ptoError, fatal: ptoError } as ReturnType<typeof getDisabledLogger>;

/** pg-transactional-outbox's own table and polling function, fresh for each trial. */
async function setupPto(): Promise<void> {
  const config = {
    outboxOrInbox: 'outbox' as const,
    database: 'unused',
    schema: ptoSchema,
    table: 'outbox',
    listenerRole: 'unused',
    nextMessagesName: 'next_outbox_messages',
  };
  await db.pool.query(DatabaseSetup.dropAndCreateTable(config));
  await db.pool.query(DatabaseSetup.createPollingFunction(config));
  // Its index statements name the indexes without a schema: run them with the search path on its schema.
  const c = await db.pool.connect();
  try {
    await c.query(`SET search_path TO ${quoteIdentifier(ptoSchema)}`);
    await c.query(DatabaseSetup.setupPollingIndexes(config));
  } finally {
    await c.query('RESET search_path');
    c.release();
  }
}

async function trialPto(stream: TestStream, keys: number): Promise<Trial> {
  await setupPto();
  const settings = {
    dbSchema: ptoSchema,
    dbTable: 'outbox',
    enableMaxAttemptsProtection: true,
    enablePoisonousMessageProtection: true,
    nextMessagesFunctionSchema: ptoSchema,
    nextMessagesFunctionName: 'next_outbox_messages',
    nextMessagesBatchSize: 100,
    nextMessagesPollingIntervalInMs: 100,
  };
  // Its listener pool polls; its handler pool runs one transaction per message (10 connections: node-postgres's default).
  const config = {
    outboxOrInbox: 'outbox' as const,
    dbListenerConfig: { connectionString: db.url, max: 2 } as ClientConfig,
    dbHandlerConfig: { connectionString: db.url, max: 10 } as ClientConfig,
    settings,
  };
  const logger = ptoLogger;
  const store = initializeMessageStorage(config, logger);
  const next = jobEvents(stream, keys);
  const producerTxPerSec = await produce(eventsFor(keys), async (c, i) => {
    const e = next(i);
    await store(
      {
        id: e.id,
        aggregateType: 'order',
        aggregateId: e.key,
        messageType: e.type,
        segment: e.key,
        concurrency: 'sequential',
        payload: e.data,
        metadata: { version: e.version, subject: e.subject },
      },
      c,
    );
  });
  const js = jetstream(stream.nc);
  let done = 0;
  const rate = steadyRate(() => done, eventsFor(keys));
  const [shutdown] = initializePollingMessageListener(
    config,
    {
      handle: async (m) => {
        const meta = m.metadata as { version: number; subject: string };
        await publishEvent(js, {
          id: m.id,
          key: m.aggregateId,
          version: meta.version,
          subject: meta.subject,
          type: m.messageType,
          data: m.payload,
        });
        done++;
      },
    },
    logger,
  );
  try {
    return { producerTxPerSec, drainPerSec: await rate };
  } finally {
    await shutdown();
  }
}

const ALL_APPROACHES = ['ferry', 'pgboss', 'pto'] as const;
type Approach = (typeof ALL_APPROACHES)[number];
const APPROACHES = ALL_APPROACHES.filter((a) => (flags.approaches || ALL_APPROACHES.join(',')).split(',').includes(a));
interface Samples {
  drain: number[];
  producer: number[];
  lost: number[];
  duplicated: number[];
}

try {
  await db.pool.query(`CREATE TABLE ${s}.accounts (id int PRIMARY KEY, balance bigint NOT NULL DEFAULT 0)`);
  await db.pool.query(`INSERT INTO ${s}.accounts (id) SELECT generate_series(1, ${ACCOUNTS})`);
  await boss.start();
  const samples = new Map<string, Samples>();
  const naive: number[] = [];
  const record = (approach: Approach, keys: number, t: Trial, d: { lost: number; duplicated: number }) => {
    const id = `${approach}/${keys}`;
    const x = samples.get(id) ?? { drain: [], producer: [], lost: [], duplicated: [] };
    x.drain.push(t.drainPerSec);
    x.producer.push(t.producerTxPerSec);
    x.lost.push(d.lost);
    x.duplicated.push(d.duplicated);
    samples.set(id, x);
  };
  let turn = 0;
  for (let t = 0; t < flags.trials; t++) {
    for (const keys of flags.keys) {
      const order = APPROACHES.map((_, i) => APPROACHES[(i + turn) % APPROACHES.length] as Approach);
      turn++;
      for (const which of order) {
        const stream = await createTestStream({ prefix: `benchalt${which}`, storage: 'file' });
        try {
          const trial =
            which === 'ferry'
              ? await trialFerry(stream, keys)
              : which === 'pgboss'
                ? await trialPgBoss(stream, keys)
                : await trialPto(stream, keys);
          const d = await delivery(stream, eventsFor(keys));
          record(which, keys, trial, d);
          console.log(
            `  trial ${t + 1}, ${keys} keys, ${which}: drain ${trial.drainPerSec.toFixed(0)} ev/s, producer ${trial.producerTxPerSec.toFixed(0)} tx/s, ${d.messages} messages, lost ${d.lost}, duplicated ${d.duplicated}`,
          );
          if (which === 'ferry' && keys === Math.max(...flags.keys)) {
            const b = await createTestStream({ prefix: 'benchaltn', storage: 'file' });
            try {
              naive.push(await trialNaive(b));
            } finally {
              await b.close();
            }
          }
        } finally {
          await stream.close();
        }
      }
    }
  }
  const pct = (x: { spread: number }) => `±${(x.spread * 100).toFixed(0)}%`;
  const NAMES: Record<Approach, string> = {
    ferry: 'ferry relay',
    pgboss: 'pg-boss key_strict_fifo queue + worker',
    pto: 'pg-transactional-outbox polling, segment = key',
  };
  const results: Record<
    string,
    // Only the approaches run (--approaches) have an entry.
    Partial<Record<Approach, { drainPerSec: Summary; producerTxPerSec: Summary; lost: number; duplicated: number; ferryVsThis: number }>>
  > = {};
  const rows: Array<Array<string | number>> = [];
  for (const keys of flags.keys) {
    const ferry = summarize(samples.get(`ferry/${keys}`)?.drain ?? []);
    const byApproach = {} as Record<
      Approach,
      { drainPerSec: Summary; producerTxPerSec: Summary; lost: number; duplicated: number; ferryVsThis: number }
    >;
    for (const a of APPROACHES) {
      const x = samples.get(`${a}/${keys}`) ?? { drain: [], producer: [], lost: [], duplicated: [] };
      const drainPerSec = summarize(x.drain);
      const producerTxPerSec = summarize(x.producer);
      const lost = x.lost.reduce((p, q) => p + q, 0);
      const duplicated = x.duplicated.reduce((p, q) => p + q, 0);
      byApproach[a] = { drainPerSec, producerTxPerSec, lost, duplicated, ferryVsThis: ferry.median / drainPerSec.median };
      rows.push([
        keys.toLocaleString('en'),
        NAMES[a],
        drainPerSec.median,
        pct(drainPerSec),
        a === 'ferry' ? '(baseline)' : `${(ferry.median / drainPerSec.median).toFixed(1)}x`,
        producerTxPerSec.median,
        `${lost} / ${duplicated}`,
      ]);
    }
    results[keys] = byApproach;
  }
  const naiveS = summarize(naive);
  const maxKeys = Math.max(...flags.keys);
  const ferryAtMax = results[maxKeys]?.ferry?.drainPerSec.median ?? Number.NaN;
  rows.push([
    maxKeys.toLocaleString('en'),
    `naive relay (one row at a time; first ${NAIVE_EVENTS} rows)`,
    naiveS.median,
    pct(naiveS),
    `${(ferryAtMax / naiveS.median).toFixed(1)}x`,
    '(ferry)',
    '',
  ]);
  printTable(
    `Alternatives: drain of ${flags.events.toLocaleString('en')} events (${FEW_KEY_EVENTS.toLocaleString('en')} below 100 keys), file storage, median of ${flags.trials} interleaved trials; producers: ${WRITERS} writers, 1 event per transaction; lost / duplicated summed over the trials`,
    ['keys', 'approach', 'drain ev/s', 'spread', 'ferry / this', 'producer tx/s', 'lost / duplicated'],
    rows,
  );
  const file = writeResult('alternatives', {
    scenario: 'alternatives',
    params: {
      events: flags.events,
      fewKeyEvents: FEW_KEY_EVENTS,
      naiveEvents: NAIVE_EVENTS,
      trials: flags.trials,
      keys: flags.keys,
      writers: WRITERS,
      storage: 'file',
      quick: flags.quick,
    },
    byKeys: results,
    naive: naiveS,
    relayVsPgBossOutbox: results[maxKeys]?.pgboss?.ferryVsThis,
    relayVsPgBossOutboxByKeys: Object.fromEntries(flags.keys.map((k) => [k, results[k]?.pgboss?.ferryVsThis])),
    relayVsTransactionalOutbox: results[maxKeys]?.pto?.ferryVsThis,
    relayVsTransactionalOutboxByKeys: Object.fromEntries(flags.keys.map((k) => [k, results[k]?.pto?.ferryVsThis])),
    relayVsNaiveRelay: ferryAtMax / naiveS.median,
    exactlyOnce: Object.fromEntries(
      APPROACHES.map((a) => [a, flags.keys.every((k) => results[k]?.[a]?.lost === 0 && results[k]?.[a]?.duplicated === 0)]),
    ),
  });
  console.log(`wrote ${file}`);
} finally {
  await boss.stop({ graceful: false }).catch(() => {});
  await db.pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(bossSchema)} CASCADE`).catch(() => {});
  await db.pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(ptoSchema)} CASCADE`).catch(() => {});
  await db.close();
}
process.exit(0);
