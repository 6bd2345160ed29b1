// `npm run chaos -- --events N --kills K [--seed S]`: Ferry under failure,
// end to end. A publisher load (several writers, many keys) commits N events
// into an outbox of its own schema on the PostgreSQL of FERRY_DATABASE_URL
// (default the local test database); two `ferry relay` processes ship them to
// a private nats-server (JetStream, file storage); two inbox consumer
// processes apply them. On a seeded schedule processes are SIGKILLed and
// restarted, nats-server is stopped and restarted once, and the relays' and
// consumers' PostgreSQL backends are terminated. Poison rides along: a key
// whose first event no stream binds and one whose first event is over the
// server's max_payload, each with later events behind it. Then it verifies:
// every committed event of the other keys is in the stream once and applied
// once, in per-key order (in the stream as read back, and as applied), and
// each poison key is blocked at its first event with nothing of it sent.
// Exit code 0: no violation; 1: a violation; 2: bad usage.
//
// A run reads top to bottom here: setup, load, faults, drain, checks, report. The parts that stand
// alone have a file each: plan.ts (flags, the run's fixed shape, fault schedule), faults.ts (fault
// injection), verdict.ts (the checks), report.ts (the closing table), supervised.ts (a child process),
// consumer.ts (the inbox child) and log.ts.
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { bossSchemaFor, migrate, quoteIdentifier, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { NatsServer, TcpProxy } from '@ferry/testkit';
import { jetstreamManager, RetentionPolicy, StorageType } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import pg from 'pg';
import type { ChaosConsumerConfig } from './consumer.js';
import { FaultInjector } from './faults.js';
import { log } from './log.js';
import {
  type ChaosOptions,
  DUPLICATE_WINDOW_MS,
  faultSchedule,
  GAP_TIMEOUT_MS,
  LATE_FIRST,
  LATE_KEYS,
  LATE_MS,
  LATE_PREFIX,
  LEASE_TERM_MS,
  POISON_BEHIND,
  POISON_KEYS,
  POISON_MAX_PAYLOAD,
  parseChaosArgs,
  seededRandom,
  UsageError,
} from './plan.js';
import { printReport } from './report.js';
import { Supervised } from './supervised.js';
import { count, judge, NOT_POISON_SQL } from './verdict.js';

const FERRY_BIN = fileURLToPath(new URL('../../relay/bin/ferry.js', import.meta.url));
const CONSUMER_BIN = fileURLToPath(new URL('./consumer.js', import.meta.url));

async function run(o: ChaosOptions): Promise<number> {
  const databaseUrl = process.env.FERRY_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
  const runId = randomBytes(3).toString('hex');
  const schema = `chaos_${runId}`;
  const bossSchema = bossSchemaFor(schema);
  const streamName = `CHAOS_${runId}`.toUpperCase();
  const prefix = `chaos_${runId}`;
  const s = quoteIdentifier(schema);
  const faults = faultSchedule(o);
  log(
    `seed ${o.seed}: ${o.events} events over ${o.keys} keys by ${o.writers} writers at ~${o.ratePerSecond}/s; ${faults.length} faults; schema ${schema}`,
  );

  const pool = new pg.Pool({ connectionString: databaseUrl, max: o.writers + 4, application_name: `chaos-${runId}` });
  // A max_payload of 64 KiB, so that the oversized poison event is over it (the publisher allows it).
  const nats = await NatsServer.start({ config: `max_payload: ${POISON_MAX_PAYLOAD}` });
  let nc: NatsConnection | undefined;
  const procs: Supervised[] = [];
  const proxies: Array<{ pg: TcpProxy; nats: TcpProxy }> = [];
  try {
    await migrate({ pool, schema, set: 'outbox', lanes: 16 });
    await migrate({ pool, schema, set: 'inbox' });
    await pool.query(
      `CREATE TABLE ${s}.effects (n bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, id uuid NOT NULL, key text NOT NULL, version bigint NOT NULL)`,
    );
    // When a consumer first saw each late key's version 1 (consumer.ts): it fails until LATE_MS after that.
    await pool.query(`CREATE TABLE ${s}.late_seen (key text PRIMARY KEY, first_seen timestamptz NOT NULL DEFAULT clock_timestamp())`);
    nc = await connect({ servers: nats.url, name: 'chaos', maxReconnectAttempts: -1, reconnectTimeWait: 250 });
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({
      name: streamName,
      subjects: [`${prefix}.>`],
      storage: StorageType.File,
      retention: RetentionPolicy.Limits,
      // Shorter than the pauses, the cuts and the lease term (issue 41): a takeover's re-sends are
      // stored again (at-least-once, counted), and a stale send of a woken or cut-off relay would be too.
      duplicate_window: DUPLICATE_WINDOW_MS * 1_000_000,
    });
    // A core subscription sees every message the relays publish, re-sends included.
    // It misses what is published while it reconnects, so its duplicate count is a lower bound.
    const sent = { total: 0, ids: new Set<string>() };
    const tap = nc.subscribe(`${prefix}.>`);
    void (async () => {
      for await (const m of tap) {
        sent.total++;
        sent.ids.add(m.headers?.get('Nats-Msg-Id') ?? '');
      }
    })();

    // Each relay reaches PostgreSQL and NATS through proxies of its own, so one can be cut off.
    const pgTarget = new URL(databaseUrl);
    for (let i = 0; i < 2; i++) {
      proxies.push({
        pg: await TcpProxy.start({ host: pgTarget.hostname, port: Number(pgTarget.port || 5432) }),
        nats: await TcpProxy.start({ host: '127.0.0.1', port: nats.port }),
      });
    }
    const viaProxy = (i: number) => {
      const u = new URL(databaseUrl);
      u.hostname = '127.0.0.1';
      u.port = String(proxies[i]?.pg.port);
      return { databaseUrl: u.toString(), natsUrl: `nats://127.0.0.1:${proxies[i]?.nats.port}` };
    };
    const relayArgs = (i: number) => () => [
      FERRY_BIN,
      'relay',
      '--database-url',
      viaProxy(i).databaseUrl,
      '--schema',
      schema,
      '--nats-url',
      viaProxy(i).natsUrl,
      '--lease-term-ms',
      String(LEASE_TERM_MS),
      '--http-port',
      '0',
      '--no-maintenance',
      '--poll-interval-ms',
      '100',
      '--publish-timeout-ms',
      '3000',
      '--breaker-cooldown-ms',
      '500',
      '--backoff-base-ms',
      '100',
      '--backoff-max-ms',
      '2000',
      '--max-attempts',
      '1000',
      '--log-level',
      'info',
    ];
    const consumerArgs = (i: number) => {
      const config: ChaosConsumerConfig = {
        databaseUrl,
        natsUrl: nats.url,
        schema,
        bossSchema,
        stream: streamName,
        consumer: 'chaos',
        applicationName: `chaos-${runId}-consumer-${i}`,
        gapTimeoutMs: GAP_TIMEOUT_MS,
        latePrefix: LATE_PREFIX,
        lateMs: LATE_MS,
      };
      return [CONSUMER_BIN, JSON.stringify(config)];
    };
    const relays = [new Supervised('relay-0', relayArgs(0)), new Supervised('relay-1', relayArgs(1))];
    const consumers = [new Supervised('consumer-0', () => consumerArgs(0)), new Supervised('consumer-1', () => consumerArgs(1))];
    procs.push(...relays, ...consumers);
    // The first consumer creates the durable; the second joins it.
    consumers[0]?.start();
    await waitUntil(() => (consumers[0]?.reports.get('started') ?? 0) > 0, 30_000, `consumer-0 to start: ${consumers[0]?.tail}`);
    for (const p of [...relays, consumers[1]]) p?.start();

    // ---- the load and the faults -------------------------------------------------------------
    const publisher = createPublisher({ schema, source: 'chaos' });
    const poisonPublisher = createPublisher({ schema, source: 'chaos', maxPayloadBytes: 1_048_576 });
    await withTransaction(pool, (tx) =>
      poisonPublisher.publishMany(tx, [
        { subject: `${prefix}-nowhere.x`, key: 'poison-unroutable', type: 'Set', data: { key: 'poison-unroutable' } },
        { subject: `${prefix}.set`, key: 'poison-oversized', type: 'Set', data: { blob: 'x'.repeat(POISON_MAX_PAYLOAD * 2) } },
        ...POISON_KEYS.flatMap((key) =>
          Array.from({ length: POISON_BEHIND }, () => ({ subject: `${prefix}.set`, key, type: 'Set', data: { key } })),
        ),
      ]),
    );
    await withTransaction(pool, (tx) =>
      publisher.publishMany(
        tx,
        Array.from({ length: LATE_KEYS * LATE_FIRST }, (_, i) => {
          const key = `${LATE_PREFIX}${i % LATE_KEYS}`;
          return { subject: `${prefix}.set`, key, type: 'Set', data: { key } };
        }),
      ),
    );
    let claimed = 0;
    let committed = 0;
    const started = Date.now();
    const writer = async (w: number) => {
      const rnd = seededRandom(o.seed * 31 + w + 1);
      while (claimed < o.events) {
        const n = Math.min(1 + Math.floor(rnd() * 8), o.events - claimed);
        claimed += n;
        const dueMs = started + (claimed / o.ratePerSecond) * 1000 - Date.now();
        if (dueMs > 0) await sleep(dueMs);
        const events = Array.from({ length: n }, () => {
          // Now and then a late key's next version, parked behind its stored ones by whichever consumer gets it.
          const key = rnd() < 0.02 ? `${LATE_PREFIX}${Math.floor(rnd() * LATE_KEYS)}` : `k${Math.floor(rnd() * o.keys)}`;
          return { subject: `${prefix}.set`, key, type: 'Set', data: { key } };
        });
        await withTransaction(pool, (tx) => publisher.publishMany(tx, events));
        committed += n;
      }
    };
    const injector = new FaultInjector({ pool, nats, proxies, procs, runId, committed: () => committed });
    await Promise.all([...Array.from({ length: o.writers }, (_, w) => writer(w)), injector.run(faults)]);
    const loadDoneAt = Date.now();
    log(`load done: ${committed} events committed in ${((loadDoneAt - started) / 1000).toFixed(1)} s; draining`);

    // ---- drain ------------------------------------------------------------------------------
    await waitUntil(
      async () =>
        (await count(pool, `SELECT count(*)::text AS n FROM ${s}.outbox_pending WHERE ${NOT_POISON_SQL}`)) === 0 &&
        (await count(pool, `SELECT count(*)::text AS n FROM ${s}.effects`)) >= committed + LATE_KEYS * LATE_FIRST,
      o.drainTimeoutMs,
      'the drain',
    ).catch((err) => log(String(err)));
    const drainMs = Date.now() - loadDoneAt;
    await sleep(2000); // a late duplicate would land now
    for (const p of procs) await p.stop();

    // ---- verify and report -------------------------------------------------------------------
    const { verdict, violations } = await judge({ pool, nc, streamName, schema, bossSchema, consumers, sent, events: o.events, drainMs });
    printReport(verdict, {
      faults: injector.counts,
      unexpectedExits: procs.reduce((n, p) => n + p.unexpectedExits, 0),
      totalMs: Date.now() - started,
      seed: o.seed,
    });
    if (violations.length > 0) {
      process.stdout.write(`FAILED: ${violations.join('; ')}\n`);
      for (const p of procs) log(`${p.name} last output:\n${p.tail}`);
      return 1;
    }
    process.stdout.write('OK: no loss, no stale copy, no duplicate effect, per-key order kept\n');
    return 0;
  } finally {
    for (const p of procs) await p.stop().catch(() => {});
    for (const p of proxies) for (const x of [p.pg, p.nats]) await x.close().catch(() => {});
    await nc?.close().catch(() => {});
    await nats.stop().catch(() => {});
    await pool.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`).catch(() => {});
    await pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(bossSchema)} CASCADE`).catch(() => {});
    await pool.end();
  }
}

async function waitUntil(check: () => boolean | Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(100);
  }
}

try {
  process.exitCode = await run(parseChaosArgs(process.argv.slice(2)));
} catch (err) {
  if (err instanceof UsageError) {
    process.stderr.write(`${err.message}\n`);
    process.exitCode = 2;
  } else {
    process.stderr.write(`chaos run failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 1;
  }
}
