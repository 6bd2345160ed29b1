// Measures what an Idempotency-Key costs on the real PostgreSQL:
//   node packages/idempotency/scripts/measure.mjs [iterations]
// (after `npx tsc --build`; FERRY_TEST_DATABASE_URL overrides the database).
// Each figure is printed beside its baseline from the same run, as a ratio.
import { performance } from 'node:perf_hooks';
import { withTransaction } from '@ferry/core';
import { createIdempotency } from '@ferry/idempotency';
import { createTestDatabase } from '@ferry/testkit';

const n = Number(process.argv[2] ?? 2000);
const db = await createTestDatabase({ prefix: 'idem_measure', migrate: ['idempotency'], max: 20 });
const s = `"${db.schema}"`;
await db.pool.query(`CREATE TABLE ${s}.orders (id serial PRIMARY KEY, sku text NOT NULL)`);
const keys = createIdempotency({ schema: db.schema, scope: 'measure' });
const fp = (i) => ({ method: 'POST', path: '/orders', body: { sku: `sku-${i}`, qty: 1 }, contentType: 'application/json' });
const insert = async (tx, i) => {
  await tx.query(`INSERT INTO ${s}.orders (sku) VALUES ($1)`, [`sku-${i}`]);
  return { status: 201, body: { sku: `sku-${i}` } };
};

async function time(label, fn) {
  for (let i = 0; i < 100; i++) await fn(-1 - i); // warm-up
  const samples = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await fn(i);
    samples.push(performance.now() - t);
  }
  samples.sort((a, b) => a - b);
  const pick = (q) => samples[Math.min(samples.length - 1, Math.floor(q * samples.length))];
  return { label, p50: pick(0.5), p99: pick(0.99), mean: samples.reduce((a, b) => a + b, 0) / samples.length };
}

const rows = [];
rows.push(await time('plain transaction (baseline)', (i) => withTransaction(db.pool, (tx) => insert(tx, i))));
rows.push(
  await time('keys.run, new key', (i) =>
    keys.run(db.pool, { key: `new-${i}`, principal: 'user-1', fingerprint: fp(i) }, (tx) => insert(tx, i)),
  ),
);
rows.push(
  await time('keys.run, replay', (i) =>
    keys.run(db.pool, { key: 'new-0', principal: 'user-1', fingerprint: fp(0) }, (tx) => insert(tx, i)),
  ),
);
const base = rows[0];
console.log(`iterations: ${n} sequential, PostgreSQL on ${new URL(db.url).host}`);
console.log('| case | p50 ms | p99 ms | mean ms | mean vs baseline |');
console.log('|---|---|---|---|---|');
for (const r of rows) {
  console.log(`| ${r.label} | ${r.p50.toFixed(3)} | ${r.p99.toFixed(3)} | ${r.mean.toFixed(3)} | ${(r.mean / base.mean).toFixed(2)}x |`);
}

// 50 simultaneous requests with one key, 10 rounds: one execution each round.
let executions = 0;
const t0 = performance.now();
for (let round = 0; round < 10; round++) {
  await Promise.all(
    Array.from({ length: 50 }, () =>
      keys.run(db.pool, { key: `storm-${round}`, principal: 'user-1', fingerprint: fp(round) }, (tx) => {
        executions++;
        return insert(tx, round);
      }),
    ),
  );
}
console.log(`50 simultaneous duplicates x 10 rounds: ${executions} executions, ${((performance.now() - t0) / 10).toFixed(1)} ms per round`);
await db.close();
