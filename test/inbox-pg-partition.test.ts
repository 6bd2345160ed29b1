// One of two inbox instances cut off from PostgreSQL (NATS still up) inside a handler, through a TCP
// proxy the test owns: a blackhole that resets nothing, so the instance's socket and the server's
// session both stay open and silent. The instance gives the message up after maxTransactionMs (its
// connection destroyed, never reused), so the other instance applies the key within the bound the
// docs state, in `latest` and `sequential` mode; after the heal nothing is applied twice.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { isTransactionTimeoutError, protectPool, withTransaction } from '@ferry/core';
import type { InboxMode, InboxReport } from '@ferry/inbox';
import { createTestDatabase, TcpProxy, waitFor } from '@ferry/testkit';
import pg from 'pg';
import { ferryEvent, type InboxFixture, inboxFixture, publishEvents } from './inbox-support.js';

const ACK_WAIT_MS = 3_000;
const IDLE_MS = 3_000;
const LOCK_MS = 3_000;
/** The default maxTransactionMs: lockTimeoutMs + transactionIdleTimeoutMs. */
const MAX_TRANSACTION_MS = LOCK_MS + IDLE_MS;
const BACKOFF_MS = 50;
/**
 * The bound docs/failure-modes.md states: the cut-off instance gives the message up after
 * maxTransactionMs and naks it with its backoff. Each time JetStream hands the message back to the
 * cut-off instance costs one maxTransactionMs more; with two instances pulling, the server's round
 * robin hands it back at most once.
 */
const BOUND_MS = MAX_TRANSACTION_MS + BACKOFF_MS;
const CEILING_MS = BOUND_MS + MAX_TRANSACTION_MS + 10_000;

const cleanups: Array<() => Promise<unknown>> = [];
after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => {});
});

interface Seen {
  instance: 'X' | 'Y';
  report: InboxReport;
  at: number;
}

async function partitionCase(mode: InboxMode, t: { diagnostic(msg: string): void }): Promise<void> {
  const fx: InboxFixture = await inboxFixture();
  cleanups.push(() => fx.close());
  const s = fx.s;
  // No unique key: a second apply of a version would show as a second row.
  await fx.db.pool.query(
    `CREATE TABLE ${s}.cut_effects (seq bigserial PRIMARY KEY, key text NOT NULL, version bigint NOT NULL, instance text NOT NULL)`,
  );
  const target = new URL(fx.db.url);
  const proxy = await TcpProxy.start({ host: target.hostname, port: Number(target.port || 5432) });
  const proxied = new URL(fx.db.url);
  proxied.host = `127.0.0.1:${proxy.port}`;
  // A plain pg.Pool as the docs show it: no client-side timeouts of its own.
  const xPool = new pg.Pool({ connectionString: proxied.toString(), max: 10 });
  protectPool(xPool);
  const removed = new Set<unknown>();
  xPool.on('remove', (client) => removed.add(client));
  // Torn down before the fixture: the proxy's close fails whatever still hangs on it, then X stops and its pool ends.
  let stopX: () => Promise<void> = async () => {};
  cleanups.push(async () => {
    await proxy.close();
    await stopX().catch(() => {});
    await xPool.end();
  });

  const seen: Seen[] = [];
  let cutAt: number | undefined;
  let cutClient: unknown;
  const options = (instance: 'X' | 'Y') => ({
    mode,
    consumer: `billing_${mode}`,
    ackWaitMs: ACK_WAIT_MS,
    transactionIdleTimeoutMs: IDLE_MS,
    lockTimeoutMs: LOCK_MS,
    backoffMs: [BACKOFF_MS],
    onEvent: (report: InboxReport) => seen.push({ instance, report, at: Date.now() }),
  });
  const effect = (instance: 'X' | 'Y') => `INSERT INTO ${s}.cut_effects (key, version, instance) VALUES ($1, $2, '${instance}')`;
  const x = fx.inbox({
    ...options('X'),
    pool: xPool,
    handlers: {
      Set: async (event, ctx) => {
        if (event.version === 2n && cutAt === undefined) {
          // Cut mid-handler: the gate's row lock is held, the effect's statement never arrives.
          cutAt = Date.now();
          cutClient = ctx.tx;
          proxy.blackhole();
        }
        await ctx.tx.query(effect('X'), [event.key, event.version.toString()]);
      },
    },
  });
  stopX = () => x.stop();
  const y = fx.inbox({
    ...options('Y'),
    handlers: {
      Set: async (event, ctx) => {
        await ctx.tx.query(effect('Y'), [event.key, event.version.toString()]);
      },
    },
  });
  const applied = (v: bigint) => seen.find((r) => r.report.kind === 'applied' && r.report.version === v);

  await x.start();
  await publishEvents(fx.stream.nc, [ferryEvent(fx.stream.prefix, { key: 'cut', version: 1 })]);
  await waitFor(() => applied(1n), { timeoutMs: 20_000, what: 'X to apply version 1' });
  await publishEvents(fx.stream.nc, [ferryEvent(fx.stream.prefix, { key: 'cut', version: 2 })]);
  await waitFor(() => cutAt, { timeoutMs: 20_000, what: "X's handler to cut itself off" });
  // Y joins once X holds the key: X is handed version 2, and Y must get it from X.
  await y.start();

  const describe = () =>
    JSON.stringify(seen.map((r) => `${r.instance}:${r.report.kind}:v${'version' in r.report ? r.report.version : '?'}`));
  const yGot = await waitFor(() => applied(2n), { timeoutMs: CEILING_MS, what: 'version 2 applied' }).catch((err: Error) => {
    throw new Error(`${err.message} within ${CEILING_MS} ms of the cut; reports ${describe()}`, { cause: err });
  });
  const wait = yGot.at - (cutAt as number);
  t.diagnostic(
    `${mode}: key applied by ${yGot.instance} ${wait} ms after the cut (bound maxTransactionMs ${MAX_TRANSACTION_MS} + backoff ${BACKOFF_MS} = ${BOUND_MS} ms, plus ${MAX_TRANSACTION_MS} ms per hand-back; ceiling ${CEILING_MS} ms)`,
  );
  assert.equal(yGot.instance, 'Y', 'the instance that can reach PostgreSQL applied version 2');
  assert.ok(wait < CEILING_MS, `version 2 waited ${wait} ms`);
  // X gave its stuck connection up: released with an error, so the pool removed it instead of reusing it.
  await waitFor(() => removed.has(cutClient), { timeoutMs: 5_000, what: "X's stuck connection removed from its pool" });

  proxy.heal();
  await publishEvents(fx.stream.nc, [ferryEvent(fx.stream.prefix, { key: 'cut', version: 3 })]);
  await waitFor(() => applied(3n), { timeoutMs: 30_000, what: 'version 3 applied after the heal' });
  // X settles whatever it still held (a hand-back of version 2 is a duplicate now).
  await waitFor(() => x.inFlight() === 0 && y.inFlight() === 0, { timeoutMs: 30_000, what: 'both instances idle' });
  await sleep(ACK_WAIT_MS); // a copy X still held unacked would be redelivered and applied by now

  const { rows } = await fx.db.pool.query<{ version: string; instance: string }>(
    `SELECT version::text, instance FROM ${s}.cut_effects WHERE key = 'cut' ORDER BY seq`,
  );
  assert.deepEqual(
    rows.map((r) => r.version),
    ['1', '2', '3'],
    `each version applied once, in order: ${JSON.stringify(rows)}`,
  );
  assert.equal(rows[1]?.instance, 'Y');
  assert.equal(
    seen.filter((r) => r.instance === 'X' && r.report.kind === 'applied' && r.report.version === 2n).length,
    0,
    'X never applied version 2',
  );
  const gaveUp = seen.find((r) => r.instance === 'X' && r.report.kind === 'failed' && r.report.version === 2n);
  assert.ok(gaveUp?.report.kind === 'failed' && isTransactionTimeoutError(gaveUp.report.error), 'X gave version 2 up on its own clock');

  // stop() drains both. X's pg-boss lost statements of its own in the blackhole (they wait forever on a
  // plain pg.Pool), so X's stop gives pg-boss up after its bound: the open pull request (2 s) and a
  // second, then the ack wait and maxTransactionMs.
  const stopping = Date.now();
  await Promise.all([x.stop(), y.stop()]);
  const stopMs = Date.now() - stopping;
  t.diagnostic(`${mode}: both instances stopped in ${stopMs} ms; X ${x.state}, Y ${y.state}`);
  assert.equal(y.state, 'stopped');
  assert.ok(x.state === 'stopped' || x.state === 'failed', x.state);
  assert.ok(stopMs < 2_000 + 1_000 + ACK_WAIT_MS + MAX_TRANSACTION_MS + 5_000, `stop() took ${stopMs} ms`);
}

test('inbox pg partition - latest: an instance cut off from PostgreSQL mid-handler gives the key up within maxTransactionMs, and nothing is applied twice after the heal', async (t) => {
  await partitionCase('latest', t);
});

test('inbox pg partition - sequential: an instance cut off from PostgreSQL mid-handler gives the key up within maxTransactionMs, and nothing is applied twice after the heal', async (t) => {
  await partitionCase('sequential', t);
});

test('withTransaction - past timeoutMs it rejects at once, its connection is destroyed rather than reused, and a connect that hangs is bounded too', async () => {
  const db = await createTestDatabase({ prefix: 'tx_timeout' });
  cleanups.push(() => db.close());
  const target = new URL(db.url);
  const proxy = await TcpProxy.start({ host: target.hostname, port: Number(target.port || 5432) });
  const proxied = new URL(db.url);
  proxied.host = `127.0.0.1:${proxy.port}`;
  const pool = new pg.Pool({ connectionString: proxied.toString(), max: 4 });
  protectPool(pool);
  cleanups.push(async () => {
    await proxy.close();
    await pool.end();
  });
  const removed = new Set<unknown>();
  pool.on('remove', (client) => removed.add(client));

  // A statement that outlives the bound.
  let slow: unknown;
  let started = performance.now();
  await assert.rejects(
    withTransaction(
      pool,
      async (tx) => {
        slow = tx;
        await tx.query('SELECT pg_sleep(30)');
      },
      { timeoutMs: 300, timeoutOption: 'maxTransactionMs' },
    ),
    (err: unknown) => isTransactionTimeoutError(err) && /maxTransactionMs \(300 ms\)/.test((err as Error).message),
  );
  const tookMs = performance.now() - started;
  assert.ok(tookMs < 1_000, `rejected after ${Math.round(tookMs)} ms`);
  await waitFor(() => removed.has(slow), { timeoutMs: 2_000, what: 'the connection removed from the pool' });

  // A statement sent into a blackhole, on a connection taken before it.
  const { rows } = await pool.query<{ one: number }>('SELECT 1 AS one');
  assert.equal(rows[0]?.one, 1);
  proxy.blackhole();
  started = performance.now();
  await assert.rejects(
    withTransaction(pool, (tx) => tx.query('SELECT 1'), { timeoutMs: 300 }),
    (err: unknown) => isTransactionTimeoutError(err),
  );
  // A connect that cannot finish (every pooled connection gone, the new one's startup dropped).
  await assert.rejects(
    withTransaction(pool, (tx) => tx.query('SELECT 1'), { timeoutMs: 300 }),
    (err: unknown) => isTransactionTimeoutError(err),
  );
  assert.ok(performance.now() - started < 2_000);
  assert.equal(pool.idleCount, 0, 'no timed-out connection went back to the pool');
});
