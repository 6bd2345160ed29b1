/**
 * What the inbox's version gate costs PostgreSQL per message, and whether
 * another form of it would cost less: one connection, one transaction per
 * message (the handler's projection upsert, as in inbox-throughput), the
 * backend's CPU from /proc. Variants, interleaved in rounds:
 * - plain:    BEGIN; handler; COMMIT (no gate);
 * - gate:     the inbox's `latest` gate as it ships, `BEGIN; EXECUTE gate(…)` in one round trip;
 * - update-first: the same round trip with an UPDATE of the key's row first and the INSERT only for a new key;
 * - extended: the shipped gate as a node-postgres named statement after its own BEGIN (two round trips).
 * `synchronous_commit = off` for the connection, so the WAL flush does not dominate.
 *
 *   node bench/dist/scenarios/inbox-gate-cost.js [--messages 4000] [--rounds 3]
 */
import { quoteIdentifier } from '@ferry/core';
import { createTestDatabase } from '@ferry/testkit';
import { declareFlags, numArg } from '../lib/args.js';
import { cpuSecondsOf } from '../lib/proc.js';
import { printTable, summarize, writeResult } from '../lib/stats.js';

declareFlags(
  'node bench/dist/scenarios/inbox-gate-cost.js',
  "The inbox gate's PostgreSQL CPU per message against no gate and two other forms of it, one connection (not part of npm run bench).",
  {
    messages: '<n> messages per variant and round (default 4,000)',
    rounds: '<n> measured rounds after one warm-up round (default 3)',
  },
);

const MESSAGES = numArg('messages', 4000);
const ROUNDS = numArg('rounds', 3);
const KEYS = 1000;

async function main() {
  const db = await createTestDatabase({ prefix: 'bench_gate', migrate: ['inbox'], max: 2 });
  const s = quoteIdentifier(db.schema);
  const t = `${s}.inbox_versions`;
  const c = await db.pool.connect();
  try {
    await c.query(`CREATE TABLE ${s}.proj (account text PRIMARY KEY, balance bigint NOT NULL, version bigint NOT NULL)`);
    await c.query('SET synchronous_commit = off');
    const backend = (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid ?? 0;
    const handler = `INSERT INTO ${s}.proj (account, balance, version) VALUES ($1, $2, $3)
      ON CONFLICT (account) DO UPDATE SET balance = excluded.balance, version = excluded.version`;
    // The shipped `latest` gate (packages/inbox/src/sql/gate-statements.ts), with parameters.
    const gate = `INSERT INTO ${t} (consumer, key, version) SELECT $1, $2, $3::bigint
      WHERE NOT EXISTS (SELECT 1 FROM ${t} WHERE consumer = $1 AND key = $2 AND version >= $3::bigint)
      ON CONFLICT (consumer, key) DO UPDATE SET version = excluded.version, applied_at = now() WHERE ${t}.version < excluded.version RETURNING 1 AS won`;
    const updateFirst = `WITH u AS (UPDATE ${t} SET version = $3::bigint, applied_at = now()
        WHERE consumer = $1 AND key = $2 AND version < $3::bigint RETURNING 1 AS won),
      i AS (INSERT INTO ${t} (consumer, key, version) SELECT $1, $2, $3::bigint
        WHERE NOT EXISTS (SELECT 1 FROM ${t} WHERE consumer = $1 AND key = $2)
        ON CONFLICT (consumer, key) DO UPDATE SET version = excluded.version, applied_at = now() WHERE ${t}.version < excluded.version RETURNING 1 AS won)
      SELECT won FROM u UNION ALL SELECT won FROM i`;
    await c.query(`PREPARE bench_gate(text, text, bigint) AS ${gate}`);
    await c.query(`PREPARE bench_update_first(text, text, bigint) AS ${updateFirst}`);
    const won = (result: unknown) => {
      const results = Array.isArray(result) ? result : [result];
      if ((results.at(-1) as { rows: unknown[] }).rows.length !== 1)
        throw new Error('a fresh version lost the gate: the benchmark is wrong');
    };
    let version = 0;
    type Step = (key: string, v: number) => Promise<void>;
    const variants: Record<string, Step> = {
      plain: async (key, v) => {
        await c.query('BEGIN');
        await c.query(handler, [key, v * 10, v]);
        await c.query('COMMIT');
      },
      gate: async (key, v) => {
        won(await c.query(`BEGIN; EXECUTE bench_gate('bench', '${key}', ${v})`));
        await c.query(handler, [key, v * 10, v]);
        await c.query('COMMIT');
      },
      'update-first': async (key, v) => {
        won(await c.query(`BEGIN; EXECUTE bench_update_first('bench', '${key}', ${v})`));
        await c.query(handler, [key, v * 10, v]);
        await c.query('COMMIT');
      },
      extended: async (key, v) => {
        await c.query('BEGIN');
        won(await c.query({ name: 'bench_gate_ext', text: gate, values: ['bench', key, v] }));
        await c.query(handler, [key, v * 10, v]);
        await c.query('COMMIT');
      },
    };
    const samples: Record<string, number[]> = Object.fromEntries(Object.keys(variants).map((k) => [k, []]));
    for (let round = 0; round <= ROUNDS; round++) {
      for (const [name, step] of Object.entries(variants)) {
        const cpu0 = cpuSecondsOf(backend) ?? 0;
        for (let i = 0; i < MESSAGES; i++) {
          version++;
          await step(`acct-${i % KEYS}`, version);
        }
        if (round > 0) samples[name]?.push((((cpuSecondsOf(backend) ?? 0) - cpu0) / MESSAGES) * 1e6);
      }
    }
    const results = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, summarize(v)]));
    const plain = results.plain?.median ?? Number.NaN;
    printTable(
      `Backend CPU per message, one connection (median of ${ROUNDS} rounds of ${MESSAGES} messages, ${KEYS} keys)`,
      ['variant', 'µs per message', 'spread', 'over plain'],
      Object.entries(results).map(([k, r]) => [k, r.median.toFixed(0), `±${(r.spread * 100).toFixed(0)}%`, (r.median - plain).toFixed(0)]),
    );
    const file = writeResult('inbox-gate-cost', { scenario: 'inbox-gate-cost', messages: MESSAGES, rounds: ROUNDS, usPerMessage: results });
    console.log(`\nwrote ${file}`);
  } finally {
    c.release();
    await db.close();
  }
}

await main();
