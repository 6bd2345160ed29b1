/**
 * Where the publisher's time goes (a profile behind scenario 1, not part of
 * the runner): one connection, business transactions of UPDATE + one event
 * statement, each statement timed from the client, and the WAL each
 * transaction writes (pg_current_wal_lsn before and after a round), and the
 * backend's CPU (utime + stime from /proc) and this process's. Variants,
 * interleaved in rounds:
 * - plain:        INSERT of the same JSON into a bigserial table (the baseline);
 * - outbox-only:  a direct INSERT into the outbox (its indexes, no key_versions);
 * - version-only: the key_versions upsert alone;
 * - publish:      publisher.publish (the publish_event function: both, plus the id check);
 * - publish-notify: the same with notify.
 *
 * Then plain and publish with flags.writers concurrent writers, sampling what their
 * backends wait on (pg_stat_activity.wait_event every 10 ms).
 *
 *   node bench/dist/scenarios/publish-profile.js [--tx 2000] [--writers 8] [--seconds 5]
 */
import { randomInt } from 'node:crypto';
import { quoteIdentifier } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createTestDatabase } from '@ferry/testkit';
import type pg from 'pg';
import { benchFlags } from '../lib/args.js';
import { cpuSecondsOf } from '../lib/proc.js';
import { printTable, writeResult } from '../lib/stats.js';

const flags = benchFlags("Where the publisher's time goes: statement times, WAL and backend CPU per variant (not part of npm run bench).", {
  tx: ['<n> transactions per variant', 2000],
  writers: ['<n> concurrent writers in the wait-event sampling', 8],
  seconds: ['<s> seconds of concurrent writing', 5],
});

const ROUND = 200;
const ACCOUNTS = 10_000;

const db = await createTestDatabase({ prefix: 'bench_pprof', lanes: 16, max: flags.writers + 2 });
const s = quoteIdentifier(db.schema);
const quiet = createPublisher({ schema: db.schema, source: 'bench' });
const loud = createPublisher({ schema: db.schema, source: 'bench', notify: true });
const payload = (i: number) => ({ orderId: `order-${i}`, total: 4999, currency: 'EUR', lines: [{ sku: 'sku-1', qty: 2 }] });
let seq = 0;

type Step = (c: pg.PoolClient, i: number) => Promise<unknown>;
const variants: Record<string, Step> = {
  plain: (c, i) => c.query(`INSERT INTO ${s}.plain_events (key, data) VALUES ($1, $2)`, [`order-${i % 5000}`, JSON.stringify(payload(i))]),
  'outbox-only': (c, i) =>
    c.query(
      `INSERT INTO ${s}.outbox (id, key, version, subject, type, source, content_type, data, occurred_at)
       VALUES (gen_random_uuid(), $1, $2, 'orders.placed', 'OrderPlaced', 'bench', 'application/json', $3, now())`,
      [`direct-${i % 5000}`, ++seq, Buffer.from(JSON.stringify(payload(i)))],
    ),
  'version-only': (c, i) =>
    c.query(`INSERT INTO ${s}.key_versions AS kv (key, version) VALUES ($1, 1) ON CONFLICT (key) DO UPDATE SET version = kv.version + 1`, [
      `vonly-${i % 5000}`,
    ]),
  publish: (c, i) => quiet.publish(c, { subject: 'orders.placed', key: `order-${i % 5000}`, type: 'OrderPlaced', data: payload(i) }),
  'publish-notify': (c, i) => loud.publish(c, { subject: 'orders.placed', key: `loud-${i % 5000}`, type: 'OrderPlaced', data: payload(i) }),
};

try {
  await db.pool.query(`CREATE TABLE ${s}.accounts (id int PRIMARY KEY, balance bigint NOT NULL DEFAULT 0)`);
  await db.pool.query(`INSERT INTO ${s}.accounts (id) SELECT generate_series(1, ${ACCOUNTS})`);
  await db.pool.query(`CREATE TABLE ${s}.plain_events (id bigserial PRIMARY KEY, key text NOT NULL, data jsonb NOT NULL)`);
  const c = await db.pool.connect();
  const acc: Record<
    string,
    { update: number; event: number; commit: number; total: number; wal: number; cpu: number; nodeCpu: number; n: number }
  > = {};
  for (const k of Object.keys(variants)) acc[k] = { update: 0, event: 0, commit: 0, total: 0, wal: 0, cpu: 0, nodeCpu: 0, n: 0 };
  const backend = (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid ?? 0;
  try {
    for (let round = 0; round * ROUND < flags.tx; round++) {
      for (const [name, step] of Object.entries(variants)) {
        const a = acc[name];
        if (!a) continue;
        const lsn0 = (await c.query<{ l: string }>('SELECT pg_current_wal_lsn()::text AS l')).rows[0]?.l;
        const cpu0 = cpuSecondsOf(backend) ?? 0;
        const node0 = process.cpuUsage();
        for (let j = 0; j < ROUND; j++) {
          const i = round * ROUND + j;
          const t0 = performance.now();
          await c.query('BEGIN');
          await c.query(`UPDATE ${s}.accounts SET balance = balance + 1 WHERE id = $1`, [randomInt(1, ACCOUNTS + 1)]);
          const t1 = performance.now();
          await step(c, i);
          const t2 = performance.now();
          await c.query('COMMIT');
          const t3 = performance.now();
          if (round > 0) {
            a.update += t1 - t0;
            a.event += t2 - t1;
            a.commit += t3 - t2;
            a.total += t3 - t0;
            a.n++;
          }
        }
        const wal = (await c.query<{ b: string }>('SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1)::text AS b', [lsn0])).rows[0]?.b;
        if (round > 0) {
          a.wal += Number(wal);
          a.cpu += (cpuSecondsOf(backend) ?? 0) - cpu0;
          const used = process.cpuUsage(node0);
          a.nodeCpu += (used.user + used.system) / 1e6;
        }
      }
    }
  } finally {
    c.release();
  }
  const rows = Object.entries(acc).map(([name, a]) => [
    name,
    a.update / a.n,
    a.event / a.n,
    a.commit / a.n,
    a.total / a.n,
    a.wal / a.n,
    (a.cpu / a.n) * 1e6,
    (a.nodeCpu / a.n) * 1e6,
    (a.total / a.n / ((acc.plain?.total ?? 0) / (acc.plain?.n ?? 1))).toFixed(2),
  ]);
  printTable(
    `Publisher profile: one connection, ${flags.tx} transactions per variant (first round of ${ROUND} not counted), mean ms per transaction`,
    ['variant', 'BEGIN+UPDATE', 'event statement', 'COMMIT', 'total', 'WAL bytes/tx*', 'backend CPU µs/tx', 'Node CPU µs/tx', 'vs plain'],
    rows,
  );
  console.log('* WAL is the server-wide LSN difference: other sessions writing at the same time inflate it.');

  // Concurrent writers: what their backends wait on, sampled from pg_stat_activity every 10 ms.
  const concurrent: Record<string, { txPerSec: number; waits: Record<string, number> }> = {};
  for (const name of ['plain', 'publish']) {
    const step = variants[name];
    if (!step) continue;
    const clients = await Promise.all(Array.from({ length: flags.writers }, () => db.pool.connect()));
    const pids = await Promise.all(
      clients.map(async (w) => (await w.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid),
    );
    const waits: Record<string, number> = {};
    let samples = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const { rows } = await db.pool.query<{ w: string; state: string }>(
          `SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU (no wait event)') AS w, state FROM pg_stat_activity WHERE pid = ANY($1::int[])`,
          [pids],
        );
        for (const r of rows) {
          const key = r.state === 'idle in transaction' || r.state === 'idle' ? `client (${r.state})` : r.w;
          waits[key] = (waits[key] ?? 0) + 1;
        }
        samples += rows.length;
        await new Promise((r) => setTimeout(r, 10));
      }
    })();
    const deadline = performance.now() + flags.seconds * 1000;
    let n = 0;
    await Promise.all(
      clients.map(async (w, k) => {
        for (let i = k; performance.now() < deadline; i += flags.writers) {
          await w.query('BEGIN');
          await w.query(`UPDATE ${s}.accounts SET balance = balance + 1 WHERE id = $1`, [randomInt(1, ACCOUNTS + 1)]);
          await step(w, i + 1_000_000);
          await w.query('COMMIT');
          n++;
        }
      }),
    );
    sampling = false;
    await sampler;
    for (const w of clients) w.release();
    const share = Object.fromEntries(
      Object.entries(waits)
        .sort((a, b) => b[1] - a[1])
        .map(([k, v]) => [k, v / samples]),
    );
    concurrent[name] = { txPerSec: n / flags.seconds, waits: share };
  }
  printTable(
    `${flags.writers} concurrent writers, ${flags.seconds} s each: tx/s and the share of backend samples per wait event`,
    ['variant', 'tx/s', 'top waits (share of samples)'],
    Object.entries(concurrent).map(([name, c]) => [
      name,
      c.txPerSec,
      Object.entries(c.waits)
        .slice(0, 5)
        .map(([k, v]) => `${k} ${(v * 100).toFixed(0)}%`)
        .join(', '),
    ]),
  );
  const file = writeResult('publish-profile', { tx: flags.tx, variants: acc, writers: flags.writers, concurrent });
  console.log(`wrote ${file}`);
} finally {
  await db.close();
}
process.exit(0);
