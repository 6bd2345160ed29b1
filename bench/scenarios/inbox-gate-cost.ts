/**
 * What the inbox's version gate costs PostgreSQL per message, and whether
 * another form of it would cost less: one connection, one transaction per
 * message (the handler's projection upsert, as in inbox-throughput), the
 * backend's CPU from /proc. Variants, interleaved in rounds:
 * - plain:    BEGIN; handler; COMMIT (no gate);
 * - gate:     the inbox's `latest` gate as it ships, `BEGIN; EXECUTE gate(…)` in one round trip;
 * - update-first: the same round trip with an UPDATE of the key's row first and the INSERT only for a new key;
 * - extended: the shipped gate as a node-postgres named statement after its own BEGIN (two round trips);
 * - bounded:  the gate as the inbox sends it, with the two `SET LOCAL` bounds (idle in transaction, lock
 *   wait) in the same round trip.
 * `synchronous_commit = off` for the connections by default, so the WAL flush does not dominate.
 * `--connections 32` runs the messages on 32 connections at once (each with keys of its own), as the
 * inbox does at its default concurrency; CPU is then the sum over their backends.
 *
 *   node bench/dist/scenarios/inbox-gate-cost.js [--messages 4000] [--rounds 3] [--connections 1] [--synchronous-commit off]
 */
import { quoteIdentifier } from '@ferry/core';
import { createTestDatabase } from '@ferry/testkit';
import type pg from 'pg';
import { benchFlags } from '../lib/args.js';
import { cpuSecondsOf } from '../lib/proc.js';
import { printTable, summarize, writeResult } from '../lib/stats.js';

const flags = benchFlags(
  "The inbox gate's PostgreSQL CPU per message against no gate and two other forms of it, one connection (not part of npm run bench).",
  {
    messages: ['<n> messages per variant and round', 4000],
    rounds: ['<n> measured rounds after one warm-up round', 3],
    connections: ['<n> connections running the messages at once, keys split between them', 1],
    'synchronous-commit': ["<on|off> the connections' synchronous_commit", 'off'],
  },
);
const SYNC = flags['synchronous-commit'];

if (SYNC !== 'on' && SYNC !== 'off') throw new Error(`--synchronous-commit is on or off, not ${JSON.stringify(SYNC)}`);
const KEYS = 1000;

async function main() {
  const db = await createTestDatabase({ prefix: 'bench_gate', migrate: ['inbox'], max: flags.connections + 1 });
  const s = quoteIdentifier(db.schema);
  const t = `${s}.inbox_versions`;
  const clients = await Promise.all(Array.from({ length: flags.connections }, () => db.pool.connect()));
  try {
    await db.pool.query(`CREATE TABLE ${s}.proj (account text PRIMARY KEY, balance bigint NOT NULL, version bigint NOT NULL)`);
    const handler = `INSERT INTO ${s}.proj (account, balance, version) VALUES ($1, $2, $3)
      ON CONFLICT (account) DO UPDATE SET balance = excluded.balance, version = excluded.version`;
    // The shipped `latest` gate (packages/inbox/src/sql/gate-statements.ts), with parameters.
    const gate = `INSERT INTO ${t} (consumer, key, version) SELECT $1, $2, $3::bigint
      WHERE NOT EXISTS (SELECT 1 FROM ${t} WHERE consumer = $1 AND key = $2 AND version >= $3::bigint)
      ON CONFLICT (consumer, key) DO UPDATE SET version = excluded.version, applied_at = now() WHERE ${t}.version < excluded.version`;
    const updateFirst = `WITH u AS (UPDATE ${t} SET version = $3::bigint, applied_at = now()
        WHERE consumer = $1 AND key = $2 AND version < $3::bigint RETURNING 1 AS won),
      i AS (INSERT INTO ${t} (consumer, key, version) SELECT $1, $2, $3::bigint
        WHERE NOT EXISTS (SELECT 1 FROM ${t} WHERE consumer = $1 AND key = $2)
        ON CONFLICT (consumer, key) DO UPDATE SET version = excluded.version, applied_at = now() WHERE ${t}.version < excluded.version RETURNING 1 AS won)
      SELECT won FROM u UNION ALL SELECT won FROM i`;
    // What the inbox sends with BEGIN (transactionBoundsSql, with the inbox's defaults' shape).
    const bounds = 'SET LOCAL idle_in_transaction_session_timeout = 60000; SET LOCAL lock_timeout = 10000;';
    const backends: number[] = [];
    for (const c of clients) {
      await c.query(`SET synchronous_commit = ${SYNC}`);
      await c.query(`PREPARE bench_gate(text, text, bigint) AS ${gate}`);
      await c.query(`PREPARE bench_update_first(text, text, bigint) AS ${updateFirst}`);
      backends.push((await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid ?? 0);
    }
    const won = (result: unknown) => {
      const results = (Array.isArray(result) ? result : [result]) as Array<{ rowCount: number | null; rows: unknown[] }>;
      const last = results.at(-1);
      if ((last?.rowCount ?? 0) !== 1 && last?.rows.length !== 1) throw new Error('a fresh version lost the gate: the benchmark is wrong');
    };
    type Step = (c: pg.PoolClient, key: string, v: number) => Promise<void>;
    const variants: Record<string, Step> = {
      plain: async (c, key, v) => {
        await c.query('BEGIN');
        await c.query(handler, [key, v * 10, v]);
        await c.query('COMMIT');
      },
      gate: async (c, key, v) => {
        won(await c.query(`BEGIN; EXECUTE bench_gate('bench', '${key}', ${v})`));
        await c.query(handler, [key, v * 10, v]);
        await c.query('COMMIT');
      },
      'update-first': async (c, key, v) => {
        won(await c.query(`BEGIN; EXECUTE bench_update_first('bench', '${key}', ${v})`));
        await c.query(handler, [key, v * 10, v]);
        await c.query('COMMIT');
      },
      extended: async (c, key, v) => {
        await c.query('BEGIN');
        won(await c.query({ name: 'bench_gate_ext', text: gate, values: ['bench', key, v] }));
        await c.query(handler, [key, v * 10, v]);
        await c.query('COMMIT');
      },
      bounded: async (c, key, v) => {
        won(await c.query(`BEGIN; ${bounds} EXECUTE bench_gate('bench', '${key}', ${v})`));
        await c.query(handler, [key, v * 10, v]);
        await c.query('COMMIT');
      },
    };
    const backendCpu = () => backends.reduce((sum, pid) => sum + (cpuSecondsOf(pid) ?? 0), 0);
    const samples: Record<string, number[]> = Object.fromEntries(Object.keys(variants).map((k) => [k, []]));
    let version = 0;
    for (let round = 0; round <= flags.rounds; round++) {
      for (const [name, step] of Object.entries(variants)) {
        const cpu0 = backendCpu();
        const base = version;
        // Connection j takes messages j, j + flags.connections, …, each on a key of its own share, so no two
        // connections ever write one key and every version is newer than the key's last.
        await Promise.all(
          clients.map(async (c, j) => {
            for (let i = j; i < flags.messages; i += flags.connections)
              await step(c, `acct-${j}-${Math.floor(i / flags.connections) % Math.ceil(KEYS / flags.connections)}`, base + i + 1);
          }),
        );
        version += flags.messages;
        if (round > 0) samples[name]?.push(((backendCpu() - cpu0) / flags.messages) * 1e6);
      }
    }
    const results = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, summarize(v)]));
    const plain = results.plain?.median ?? Number.NaN;
    printTable(
      `Backend CPU per message, ${flags.connections} connection(s), synchronous_commit ${SYNC} (median of ${flags.rounds} rounds of ${flags.messages} messages, ${KEYS} keys)`,
      ['variant', 'µs per message', 'spread', 'over plain'],
      Object.entries(results).map(([k, r]) => [k, r.median.toFixed(0), `±${(r.spread * 100).toFixed(0)}%`, (r.median - plain).toFixed(0)]),
    );
    const file = writeResult(flags.connections === 1 ? 'inbox-gate-cost' : `inbox-gate-cost-${flags.connections}`, {
      scenario: 'inbox-gate-cost',
      messages: flags.messages,
      rounds: flags.rounds,
      connections: flags.connections,
      synchronousCommit: SYNC,
      usPerMessage: results,
    });
    console.log(`\nwrote ${file}`);
  } finally {
    for (const c of clients) c.release();
    await db.close();
  }
}

await main();
