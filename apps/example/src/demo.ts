/**
 * The orders → billing demo: every part of Ferry against the local PostgreSQL
 * and NATS, with the failures Ferry exists for thrown in.
 *
 *   npm run demo [-- --orders 60 --keep]
 *
 * 1. An orders service (HTTP, Idempotency-Key) publishes OrderPlaced through
 *    the outbox, in the same transaction as the order and the key record.
 * 2. The relay ships the outbox to JetStream; it is stopped and a new one
 *    started in the middle of the traffic.
 * 3. A billing consumer charges through the inbox and enqueues a receipt
 *    email (pg-boss) in the charge's transaction.
 * Both use the event contracts of contracts.ts: orders publishes OrderPlaced
 * v2 (every seventh order as v1, as its previous release did), checked before
 * the insert; billing's inbox checks each event again and upcasts v1 to v2.
 * 4. Clients retry with the same key (sequentially, concurrently, and after a
 *    timeout that hit once the order had committed), and every event is
 *    delivered a second time (a replay with new message ids).
 * It ends with a summary and exits non-zero if anything was lost or doubled.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  bossSchemaFor,
  encodeEvent,
  eventFromOutboxRow,
  migrate,
  type OutboxEventRow,
  quoteIdentifier,
  relayBossSchemaFor,
} from '@ferry/core';
import { createRelay, OUTBOX_EVENT_COLUMNS, type Relay } from '@ferry/relay';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection, headers as natsHeaders } from '@nats-io/transport-node';
import pg from 'pg';
import { type Billing, startBilling } from './billing.js';
import { DEMO_TOKENS, type OrderRequest, startOrdersService } from './orders-service.js';

const DATABASE_URL = process.env.FERRY_DATABASE_URL ?? process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const NATS_URL = process.env.FERRY_NATS_URL ?? 'nats://127.0.0.1:4222';
const SCHEMA = 'ferry_demo';
const STREAM = 'FERRY_DEMO';
const argv = process.argv.slice(2);
const ORDERS = Number(argv[argv.indexOf('--orders') + 1] ?? 0) || 60;
const KEEP = argv.includes('--keep');

const t0 = Date.now();
const say = (line: string, stamp = true) =>
  process.stdout.write(stamp && line.startsWith('  ') ? `[${((Date.now() - t0) / 1000).toFixed(1).padStart(5)}s]${line}\n` : `${line}\n`);
const quietLogger = {
  child: () => quietLogger,
  trace: () => {},
  debug: () => {},
  info: () => {},
  warn: (o: unknown, m?: string) => say(`  warn: ${m ?? ''} ${o instanceof Error ? o.message : ''}`),
  error: (o: unknown, m?: string) => say(`  error: ${m ?? ''} ${o instanceof Error ? o.message : JSON.stringify(o)}`),
};

async function reachable(): Promise<{ pool: pg.Pool; nc: NatsConnection } | undefined> {
  const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 20, connectionTimeoutMillis: 3_000 });
  try {
    await pool.query('SELECT 1');
  } catch (err) {
    await pool.end();
    say(
      `PostgreSQL is not reachable (${(err as Error).message}): start it with \`docker compose up -d postgres nats\`, or set FERRY_DATABASE_URL.`,
    );
    return undefined;
  }
  try {
    const nc = await connect({ servers: NATS_URL, timeout: 3_000, name: 'ferry-demo' });
    await jetstreamManager(nc); // fails fast without JetStream
    return { pool, nc };
  } catch (err) {
    await pool.end();
    say(
      `NATS with JetStream is not reachable at ${NATS_URL} (${(err as Error).message}): start it with \`docker compose up -d nats\`, or set FERRY_NATS_URL.`,
    );
    return undefined;
  }
}

async function reset(pool: pg.Pool, nc: NatsConnection): Promise<void> {
  for (const schema of [SCHEMA, bossSchemaFor(SCHEMA), relayBossSchemaFor(SCHEMA), bossSchemaFor('ferry_demo_relay')])
    await pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(schema)} CASCADE`);
  const jsm = await jetstreamManager(nc);
  await jsm.streams.delete(STREAM).catch(() => false);
}

async function post(url: string, key: string, body: OrderRequest, timeoutMs = 5_000) {
  const res = await fetch(`${url}/orders`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key, authorization: `Bearer ${[...DEMO_TOKENS.keys()][0]}` },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  return {
    status: res.status,
    replayed: res.headers.get('idempotent-replayed') === 'true',
    body: (await res.json()) as { orderId?: string },
  };
}

function startRelay(nc: NatsConnection | undefined): Relay {
  void nc;
  return createRelay({
    databaseUrl: DATABASE_URL,
    nats: { servers: NATS_URL },
    schema: SCHEMA,
    pollIntervalMs: 100,
    ensureStreams: [{ name: STREAM, subjects: ['demo.orders.>'] }],
    maintenance: false,
    logger: quietLogger,
  });
}

async function main(): Promise<number> {
  const conns = await reachable();
  if (!conns) return 1;
  const { pool, nc } = conns;
  let relay: Relay | undefined;
  let billing: Billing | undefined;
  let server: { close(): void } | undefined;
  const started = Date.now();
  try {
    await reset(pool, nc);
    const s = quoteIdentifier(SCHEMA);
    for (const set of ['outbox', 'idempotency', 'inbox'] as const) await migrate({ pool, schema: SCHEMA, set });
    await pool.query(
      `CREATE TABLE ${s}.orders (id uuid PRIMARY KEY, customer text NOT NULL, total_cents int NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`,
    );
    // No unique constraint on order_id: the demo must be able to see a double charge if one happened.
    await pool.query(
      `CREATE TABLE ${s}.charges (id bigserial PRIMARY KEY, order_id uuid NOT NULL, customer text NOT NULL, amount_cents int NOT NULL)`,
    );
    await pool.query(
      `CREATE TABLE ${s}.emails (order_id uuid NOT NULL, job_id uuid PRIMARY KEY, sent_at timestamptz NOT NULL DEFAULT now())`,
    );
    say(`Ferry demo: ${ORDERS} orders against ${DATABASE_URL.replace(/:[^:@/]*@/, ':***@')} and ${NATS_URL}`);

    relay = startRelay(nc);
    await relay.start();
    say('  relay started (stream FERRY_DEMO ensured)');
    billing = await startBilling({ pool, databaseUrl: DATABASE_URL, nc, stream: STREAM, schema: SCHEMA, log: say });
    say('  billing consumer started (inbox, mode latest, contracts OrderPlaced v1..v2)');
    const orders = await startOrdersService(pool, SCHEMA);
    server = orders.server;
    say(`  orders service listening on ${orders.url}`);

    // Traffic. Every logical order has ONE idempotency key, reused by every retry.
    let requests = 0;
    let replays = 0;
    let legacy = 0;
    const created = new Set<string>();
    const customers = ['ada', 'grace', 'barbara', 'edsger', 'leslie', 'margaret'];
    for (let i = 0; i < ORDERS; i++) {
      const key = randomUUID();
      const order: OrderRequest = { customer: customers[i % customers.length] as string, totalCents: 1000 + i };
      if (i % 7 === 6) {
        order.legacyEvent = true;
        legacy++;
      }
      const answers: Array<{ status: number; replayed: boolean; body: { orderId?: string } }> = [];
      if (i % 5 === 1) {
        // a plain retry: the client did not trust the first answer
        answers.push(await post(orders.url, key, order), await post(orders.url, key, order));
        requests += 2;
      } else if (i % 5 === 2) {
        // three concurrent duplicates: the key's unique index lets one run
        answers.push(...(await Promise.all([post(orders.url, key, order), post(orders.url, key, order), post(orders.url, key, order)])));
        requests += 3;
      } else if (i % 5 === 3) {
        // the lost response: the client times out after the order committed, then retries
        requests += 1;
        await post(orders.url, key, { ...order, slowMs: 300 }, 100).catch(() => undefined);
        await sleep(350);
        answers.push(await post(orders.url, key, { ...order, slowMs: 300 }));
        requests += 1;
      } else {
        answers.push(await post(orders.url, key, order));
        requests += 1;
      }
      for (const a of answers) {
        if (a.status !== 201 || !a.body.orderId) throw new Error(`order ${i}: unexpected answer ${a.status} ${JSON.stringify(a.body)}`);
        created.add(a.body.orderId);
        if (a.replayed) replays++;
      }
      if (i === Math.floor(ORDERS / 2)) {
        await relay.stop();
        say('  relay stopped mid-traffic (graceful drain); orders keep committing to the outbox');
        await sleep(200);
        relay = startRelay(nc);
        await relay.start();
        say('  a new relay started and took over the lanes');
      }
    }
    say(`  ${requests} HTTP requests sent for ${ORDERS} orders (${replays} answered from the idempotency store)`);

    // Wait until every order is charged.
    const deadline = Date.now() + 60_000;
    const count = async (sql: string) => Number((await pool.query(sql)).rows[0].n);
    while ((await count(`SELECT count(DISTINCT order_id) AS n FROM ${s}.charges`)) < created.size) {
      if (Date.now() > deadline) throw new Error('timed out waiting for the charges');
      await sleep(100);
    }

    // Every event delivered a second time: a replay of the stream with new message ids.
    const js = jetstream(nc);
    const { rows } = await pool.query<OutboxEventRow>(`SELECT ${OUTBOX_EVENT_COLUMNS} FROM ${s}.outbox o ORDER BY o.seq`);
    for (const r of rows) {
      const enc = encodeEvent(eventFromOutboxRow(r), { msgId: `${r.id}:demo-replay` });
      const h = natsHeaders();
      for (const [n, v] of enc.headers) h.set(n, v);
      await js.publish(enc.subject, enc.body, { headers: h });
    }
    say(`  every event delivered again (${rows.length} duplicate deliveries)`);
    const dropped = () => (billing as Billing).inbox.counts().stale + (billing as Billing).inbox.counts().duplicate;
    while (dropped() < rows.length) {
      if (Date.now() > deadline)
        throw new Error(`timed out waiting for the duplicates to be dropped: ${JSON.stringify((billing as Billing).inbox.counts())}`);
      await sleep(100);
    }
    while ((await count(`SELECT count(*) AS n FROM ${s}.emails`)) < created.size) {
      if (Date.now() > deadline) throw new Error('timed out waiting for the receipt emails');
      await sleep(100);
    }

    const jsm = await jetstreamManager(nc);
    const info = await jsm.streams.info(STREAM);
    const summary = {
      orders: await count(`SELECT count(*) AS n FROM ${s}.orders`),
      events: await count(`SELECT count(*) AS n FROM ${s}.outbox`),
      published: await count(`SELECT count(*) AS n FROM ${s}.outbox_published WHERE dead_at IS NULL`),
      inStream: info.state.messages - rows.length,
      charges: await count(`SELECT count(*) AS n FROM ${s}.charges`),
      emails: await count(`SELECT count(*) AS n FROM ${s}.emails`),
      duplicatesDropped: billing.inbox.counts().stale + billing.inbox.counts().duplicate,
      doubleCharges: await count(`SELECT count(*) AS n FROM (SELECT order_id FROM ${s}.charges GROUP BY order_id HAVING count(*) > 1) d`),
    };
    say('');
    say('Summary');
    say(`  HTTP requests         ${requests}  (${replays} replayed from the idempotency store)`, false);
    say(`  orders                ${summary.orders}`, false);
    say(`  events (outbox)       ${summary.events}  (${summary.published} published)`, false);
    say(`  events (stream)       ${summary.inStream}  (+${rows.length} replayed copies)`, false);
    say(`  charges               ${summary.charges}  (${billing.upcast.size} of them from OrderPlaced v1 events, upcast to v2)`, false);
    say(`  emails                ${summary.emails}`, false);
    say(`  duplicates dropped    ${summary.duplicatesDropped}  (by the inbox)`, false);
    say(`  double charges: ${summary.doubleCharges}`, false);
    say(`  took ${((Date.now() - started) / 1000).toFixed(1)} s`, false);
    const ok =
      summary.orders === ORDERS &&
      summary.events === ORDERS &&
      summary.published === ORDERS &&
      summary.inStream === ORDERS &&
      summary.charges === ORDERS &&
      summary.emails === ORDERS &&
      billing.upcast.size === legacy &&
      summary.doubleCharges === 0;
    say(ok ? 'OK: every order charged exactly once.' : 'FAILED: see the counts above.');
    return ok ? 0 : 1;
  } catch (err) {
    say(`demo failed: ${(err as Error).stack ?? err}`);
    return 1;
  } finally {
    server?.close();
    await billing?.stop().catch(() => undefined);
    await relay?.stop().catch(() => undefined);
    if (!KEEP) await reset(pool, nc).catch(() => undefined);
    await nc.close();
    await pool.end();
  }
}

process.exitCode = await main();
