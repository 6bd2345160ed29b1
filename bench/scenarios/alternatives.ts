/**
 * Scenario 5, the alternatives a user would pick instead, same run, same
 * events (N events over 1,000 keys, 8 writers, one event per business
 * transaction):
 * - ferry: `publisher.publish` in the business transaction, drained by the relay;
 * - pg-boss as the outbox: `boss.send` in the business transaction (pg-boss's
 *   `db` adapter on the caller's client) to a `key_strict_fifo` queue keyed by
 *   the event key, a pg-boss worker (batches of 100, burst fetching) publishing
 *   each job to JetStream and completing it after the PubAck;
 * - a naive relay on the same outbox: claim one row (FOR UPDATE SKIP LOCKED),
 *   publish, await the PubAck, mark it, commit; one at a time.
 * Drain throughput is the steady rate: from a tenth of the events acknowledged
 * to the last (a cold start — connections, JIT, the first JetStream request —
 * counts against no one). Producer
 * transactions per second are reported too. Trials interleaved, order rotating.
 *
 * The naive relay drains the first 1,000 rows of the same backlog (its rate is
 * one round trip set per row whatever the backlog size).
 *
 *   node bench/dist/scenarios/alternatives.js [--quick] [--events 6000] [--naive-events 1000] [--trials 3]
 */
import { randomInt } from 'node:crypto';
import { encodeEvent, eventFromOutboxRow, quoteIdentifier } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createTestDatabase, createTestStream, natsUrl, type TestStream } from '@ferry/testkit';
import { jetstream } from '@nats-io/jetstream';
import { headers } from '@nats-io/transport-node';
import type pg from 'pg';
import { PgBoss } from 'pg-boss';
import { numArg } from '../lib/args.js';
import { startRelay } from '../lib/outbox.js';
import { hasFlag, printTable, summarize, writeResult } from '../lib/stats.js';

const QUICK = hasFlag('quick');
const EVENTS = numArg('events', QUICK ? 600 : 6000);
const TRIALS = numArg('trials', QUICK ? 1 : 3);
/** The naive relay drains only the first rows of the same backlog: one row per round trip, its rate does not depend on the backlog size. */
const NAIVE_EVENTS = Math.min(EVENTS, numArg('naive-events', QUICK ? 200 : 1000));
const KEYS = 1000;
const WRITERS = 8;
const ACCOUNTS = 10_000;

const db = await createTestDatabase({ prefix: 'bench_alt', lanes: 16, max: WRITERS + 4 });
const s = quoteIdentifier(db.schema);
const bossSchema = `${db.schema}_boss`;
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

/** WRITERS loops of business transactions until `EVENTS` are written; transactions per second. */
async function produce(step: (c: pg.PoolClient, i: number) => Promise<void>): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: WRITERS }, async () => {
      const c = await db.pool.connect();
      try {
        for (let i = next++; i < EVENTS; i = next++) {
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
  return EVENTS / ((performance.now() - started) / 1000);
}

/**
 * Steady drain rate: events per second from the moment a tenth of `total` is
 * done to the last one, so that a cold start (first connections, JIT, the
 * first JetStream request) counts against no one.
 */
async function steadyRate(done: () => number, total: number): Promise<number> {
  const t0 = performance.now();
  let t1 = 0;
  let c1 = 0;
  for (;;) {
    const c = done();
    const now = performance.now();
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

async function count(stream: TestStream): Promise<number> {
  return (await stream.jsm.streams.info(stream.name)).state.messages;
}

async function trialFerry(stream: TestStream): Promise<{ producerTxPerSec: number; drainPerSec: number }> {
  await db.pool.query(`TRUNCATE ${s}.outbox, ${s}.key_versions`);
  const producerTxPerSec = await produce(async (c, i) => {
    await publisher.publish(c, { subject: `${stream.prefix}.orders`, key: `order-${i % KEYS}`, type: 'OrderPlaced', data: payload(i) });
  });
  await db.pool.query(`VACUUM ANALYZE ${s}.outbox`);
  const { relay, marked } = await startRelay({ databaseUrl: db.url, schema: db.schema, nats: { servers: natsUrl() } });
  const drainPerSec = await steadyRate(marked, EVENTS);
  await relay.stop();
  return { producerTxPerSec, drainPerSec };
}

/** The naive relay over the outbox ferry just drained (reset to unpublished, new stream). */
async function trialNaive(stream: TestStream): Promise<number> {
  await db.pool.query(`UPDATE ${s}.outbox SET published_at = NULL, subject = $1 || '.orders'`, [stream.prefix]);
  await db.pool.query(`VACUUM ANALYZE ${s}.outbox`);
  const js = jetstream(stream.nc);
  const c = await db.pool.connect();
  let n = 0;
  const rate = steadyRate(() => n, NAIVE_EVENTS);
  try {
    while (n < NAIVE_EVENTS) {
      await c.query('BEGIN');
      const { rows } = await c.query(
        `SELECT seq, id::text, key, version::text, subject, type, source, content_type, data, headers, occurred_at
           FROM ${s}.outbox WHERE published_at IS NULL ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED`,
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
      await c.query(`UPDATE ${s}.outbox SET published_at = now() WHERE seq = $1`, [r.seq]);
      await c.query('COMMIT');
      n++;
    }
  } finally {
    c.release();
  }
  if (n !== NAIVE_EVENTS) throw new Error(`naive relay published ${n} of ${NAIVE_EVENTS}`);
  return await rate;
}

async function trialPgBoss(stream: TestStream, t: number): Promise<{ producerTxPerSec: number; drainPerSec: number }> {
  const queue = `outbox-${t}`;
  await boss.createQueue(queue, { policy: 'key_strict_fifo' });
  const versions = new Map<string, number>();
  const producerTxPerSec = await produce(async (c, i) => {
    const key = `order-${i % KEYS}`;
    const version = (versions.get(key) ?? 0) + 1;
    versions.set(key, version);
    const job: JobEvent = {
      id: crypto.randomUUID(),
      key,
      version,
      subject: `${stream.prefix}.orders`,
      type: 'OrderPlaced',
      data: payload(i),
    };
    await boss.send(queue, job, { singletonKey: key, db: { executeSql: (text, values) => c.query(text, values) } });
  });
  const js = jetstream(stream.nc);
  let done = 0;
  const rate = steadyRate(() => done, EVENTS);
  await boss.work<JobEvent>(
    queue,
    { batchSize: 100, localConcurrency: 2, pollingIntervalSeconds: 0.5, burstWhenBatchFull: true },
    async (jobs) => {
      await Promise.all(
        jobs.map(async (job) => {
          const e = job.data;
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
        }),
      );
      done += jobs.length;
    },
  );
  const drainPerSec = await rate;
  await boss.offWork(queue);
  await boss.deleteQueue(queue);
  return { producerTxPerSec, drainPerSec };
}

try {
  await db.pool.query(`CREATE TABLE ${s}.accounts (id int PRIMARY KEY, balance bigint NOT NULL DEFAULT 0)`);
  await db.pool.query(`INSERT INTO ${s}.accounts (id) SELECT generate_series(1, ${ACCOUNTS})`);
  await boss.start();
  const samples = {
    ferry: [] as number[],
    naive: [] as number[],
    pgboss: [] as number[],
    ferryTx: [] as number[],
    pgbossTx: [] as number[],
  };
  for (let t = 0; t < TRIALS; t++) {
    const order = [
      ['ferry', 'pgboss'],
      ['pgboss', 'ferry'],
    ][t % 2] as string[];
    for (const which of order) {
      if (which === 'ferry') {
        const a = await createTestStream({ prefix: 'benchaltf' });
        const b = await createTestStream({ prefix: 'benchaltn' });
        try {
          const f = await trialFerry(a);
          const naive = await trialNaive(b);
          if ((await count(a)) !== EVENTS || (await count(b)) !== NAIVE_EVENTS) throw new Error('a stream is missing events');
          samples.ferry.push(f.drainPerSec);
          samples.ferryTx.push(f.producerTxPerSec);
          samples.naive.push(naive);
        } finally {
          await a.close();
          await b.close();
        }
      } else {
        const st = await createTestStream({ prefix: 'benchaltb' });
        try {
          const p = await trialPgBoss(st, t);
          if ((await count(st)) !== EVENTS) throw new Error('the pg-boss stream is missing events');
          samples.pgboss.push(p.drainPerSec);
          samples.pgbossTx.push(p.producerTxPerSec);
        } finally {
          await st.close();
        }
      }
    }
  }
  const ferry = summarize(samples.ferry);
  const naive = summarize(samples.naive);
  const pgboss = summarize(samples.pgboss);
  const ferryTx = summarize(samples.ferryTx);
  const pgbossTx = summarize(samples.pgbossTx);
  const relayVsPgBossOutbox = ferry.median / pgboss.median;
  const relayVsNaiveRelay = ferry.median / naive.median;
  const pct = (x: { spread: number }) => `±${(x.spread * 100).toFixed(0)}%`;
  printTable(
    `Alternatives: drain of ${EVENTS.toLocaleString('en')} events (${KEYS} keys), median of ${TRIALS} interleaved trials; producers: ${WRITERS} writers, 1 event per transaction`,
    ['approach', 'drain ev/s', 'spread', 'ferry / this', 'producer tx/s', 'spread'],
    [
      ['ferry relay', ferry.median, pct(ferry), '(baseline)', ferryTx.median, pct(ferryTx)],
      [
        'pg-boss key_strict_fifo queue + worker',
        pgboss.median,
        pct(pgboss),
        `${relayVsPgBossOutbox.toFixed(1)}x`,
        pgbossTx.median,
        pct(pgbossTx),
      ],
      [
        `naive relay (one row at a time; first ${NAIVE_EVENTS} rows)`,
        naive.median,
        pct(naive),
        `${relayVsNaiveRelay.toFixed(1)}x`,
        '(same as ferry)',
        '',
      ],
    ],
  );
  const file = writeResult('alternatives', {
    scenario: 'alternatives',
    params: { events: EVENTS, naiveEvents: NAIVE_EVENTS, trials: TRIALS, keys: KEYS, writers: WRITERS, quick: QUICK },
    drainPerSec: { ferry, pgboss, naive },
    producerTxPerSec: { ferry: ferryTx, pgboss: pgbossTx },
    relayVsPgBossOutbox,
    relayVsNaiveRelay,
    producerFerryVsPgBoss: ferryTx.median / pgbossTx.median,
  });
  console.log(`wrote ${file}`);
} finally {
  await boss.stop({ graceful: false }).catch(() => {});
  await db.pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(bossSchema)} CASCADE`).catch(() => {});
  await db.close();
}
process.exit(0);
