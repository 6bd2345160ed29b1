// One file (over ~350 lines) because a run reads top to bottom: setup, load, faults, drain, checks;
// the parts that stand alone are plan.ts (flags, fault schedule) and consumer.ts (the inbox child).
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
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { bossSchemaFor, migrate, quoteIdentifier, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { NatsServer, TcpProxy } from '@ferry/testkit';
import { DeliverPolicy, jetstream, jetstreamManager, RetentionPolicy, StorageType } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import pg from 'pg';
import type { ChaosConsumerConfig } from './consumer.js';
import { type ChaosOptions, type Fault, faultSchedule, parseChaosArgs, seededRandom, UsageError } from './plan.js';
import { Supervised } from './supervised.js';

const FERRY_BIN = fileURLToPath(new URL('../../relay/bin/ferry.js', import.meta.url));
const CONSUMER_BIN = fileURLToPath(new URL('./consumer.js', import.meta.url));
/** The relays' lease term: short, so that pauses and cuts longer than it move lanes within the run. */
const LEASE_TERM_MS = 2000;
/** The stream's duplicate window: shorter than the term and than most pauses, so JetStream hides no stale copy. */
const DUPLICATE_WINDOW_MS = 1000;

const log = (msg: string) => process.stderr.write(`[chaos ${new Date().toISOString().slice(11, 23)}] ${msg}\n`);

interface Verdict {
  committed: number;
  inStream: number;
  streamDistinct: number;
  streamOrderViolations: number;
  /** Copies stored after their row was marked published: only a relay that lost the lane writes those. */
  staleCopies: number;
  applied: number;
  appliedTwice: number;
  orderViolations: number;
  published: number;
  resent: number;
  inboxDropped: number;
  drainMs: number;
}

const POISON_MAX_PAYLOAD = 65_536;
/** Poison keys: the first event of each can never be published; three events wait behind it. */
const POISON_KEYS = ['poison-unroutable', 'poison-oversized'] as const;
const POISON_BEHIND = 3;
/**
 * Late-gap keys: each gets LATE_FIRST versions in one transaction at the start, and its version 1
 * fails until LATE_MS after a consumer first saw it, so versions 2.. are stored, wait GAP_TIMEOUT_MS and park (a flush
 * by one consumer while the other parks the key's newer versions, which the writers keep adding);
 * then version 1 arrives late and must go ahead of them (issue 28).
 */
const LATE_PREFIX = 'late-';
const LATE_KEYS = 3;
const LATE_FIRST = 120;
const LATE_MS = 4_000;
const GAP_TIMEOUT_MS = 1_500;

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
    const byName = new Map(procs.map((p) => [p.name, p]));

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
    const faultLog = { kills: 0, natsRestarts: 0, backendsTerminated: 0, pauses: 0, pausesOverTerm: 0, partitions: 0, leaseKills: 0 };
    const runFaults = async () => {
      for (const f of faults) {
        while (committed < f.atEvent) await sleep(20);
        await inject(f);
      }
    };
    const inject = async (f: Fault) => {
      if (f.kind === 'kill') {
        log(`at ${committed}: SIGKILL ${f.target}, down ${f.downMs} ms`);
        await byName.get(f.target)?.kill(f.downMs);
        faultLog.kills++;
      } else if (f.kind === 'pause') {
        log(`at ${committed}: SIGSTOP ${f.target} for ${f.pauseMs} ms`);
        await byName.get(f.target)?.pause(f.pauseMs);
        faultLog.pauses++;
        if (f.pauseMs > LEASE_TERM_MS) faultLog.pausesOverTerm++;
      } else if (f.kind === 'partition') {
        const proxy = proxies[f.relay]?.[f.from];
        log(`at ${committed}: relay-${f.relay} cut off from ${f.from === 'pg' ? 'PostgreSQL' : 'NATS'} for ${f.cutMs} ms`);
        proxy?.blackhole();
        await sleep(f.cutMs);
        // PostgreSQL: the relay's side of the old connections is gone, the server's left open (half-open).
        if (f.from === 'pg') proxy?.halfOpen();
        else proxy?.heal();
        faultLog.partitions++;
      } else if (f.kind === 'lease-kill') {
        // The relay may be between two lease connections (restarted, just woken, cut off): wait up to 3 s for one.
        let rowCount: number | null = 0;
        for (let tries = 0; tries < 30 && !rowCount; tries++) {
          if (tries > 0) await sleep(100);
          const instances = [...(byName.get(`relay-${f.relay}`)?.instances ?? [])].map((i) => `ferry-relay:${i}:lease:%`);
          ({ rowCount } = await pool.query(
            'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE ANY($1::text[]) AND pid <> pg_backend_pid()',
            [instances],
          ));
        }
        faultLog.leaseKills += rowCount ?? 0;
        log(`at ${committed}: terminated relay-${f.relay}'s lease connection (${rowCount} backend)`);
      } else if (f.kind === 'nats-restart') {
        log(`at ${committed}: nats-server stopped for ${f.downMs} ms`);
        await nats.kill('SIGTERM');
        await sleep(f.downMs);
        await nats.restart();
        faultLog.natsRestarts++;
        log('nats-server back');
      } else {
        const p = byName.get(f.target);
        const names = p?.name.startsWith('relay')
          ? [...(p?.instances ?? [])].map((i) => `ferry-relay:${i}%`)
          : [`chaos-${runId}-${p?.name}`];
        const { rowCount } = await pool.query(
          'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE ANY($1::text[]) AND pid <> pg_backend_pid()',
          [names],
        );
        faultLog.backendsTerminated += rowCount ?? 0;
        log(`at ${committed}: terminated ${rowCount} PostgreSQL backends of ${f.target}`);
      }
    };
    await Promise.all([...Array.from({ length: o.writers }, (_, w) => writer(w)), runFaults()]);
    const loadDoneAt = Date.now();
    log(`load done: ${committed} events committed in ${((loadDoneAt - started) / 1000).toFixed(1)} s; draining`);

    // ---- drain ------------------------------------------------------------------------------
    const count = async (sql: string) => Number((await pool.query<{ n: string }>(sql)).rows[0]?.n ?? 0);
    const notPoison = `key <> ALL ('{${POISON_KEYS.join(',')}}'::text[])`;
    await waitUntil(
      async () =>
        (await count(`SELECT count(*)::text AS n FROM ${s}.outbox_pending WHERE ${notPoison}`)) === 0 &&
        (await count(`SELECT count(*)::text AS n FROM ${s}.effects`)) >= committed + LATE_KEYS * LATE_FIRST,
      o.drainTimeoutMs,
      'the drain',
    ).catch((err) => log(String(err)));
    const drainMs = Date.now() - loadDoneAt;
    await sleep(2000); // a late duplicate would land now
    for (const p of procs) await p.stop();

    // ---- verify -----------------------------------------------------------------------------
    const stream = await readStreamIds(nc, streamName);
    const poisonInStream = stream.filter((m) => (POISON_KEYS as readonly string[]).includes(m.key)).length;
    const poison = await pool.query<{ key: string; version: string; attempts: number; dead: boolean; published: boolean }>(
      `SELECT key, version::text, attempts, dead_at IS NOT NULL AS dead, published_at IS NOT NULL AS published
         FROM ${s}.outbox_events WHERE NOT (${notPoison}) ORDER BY key, outbox_events.version`, // the bigint: 10 after 9
    );
    const poisonHeld = POISON_KEYS.every((key) => {
      const rows = poison.rows.filter((r) => r.key === key);
      const [head, ...behind] = rows;
      return (
        rows.length === 1 + POISON_BEHIND &&
        head !== undefined &&
        head.attempts > 0 &&
        !head.published &&
        (key !== 'poison-oversized' || head.dead) &&
        behind.every((r) => r.attempts === 0 && !r.published)
      );
    });
    // Order is checked on each event's first copy. A later copy is a re-send: a takeover's (the new holder
    // re-sends from the key's head what the last one sent but did not mark), or a stale one. A stale copy
    // is one stored after its row was marked published: no holder sends a row once it is marked, so only
    // a relay that lost the lane (woken, cut off) could have written it.
    const publishedAt = new Map(
      (
        await pool.query<{ id: string; ms: number }>(
          `SELECT id::text, (extract(epoch FROM published_at) * 1000)::float8 AS ms FROM ${s}.outbox_events WHERE published_at IS NOT NULL`,
        )
      ).rows.map((r) => [r.id, r.ms]),
    );
    const lastVersion = new Map<string, bigint>();
    const firstSeen = new Set<string>();
    let streamOrderViolations = 0;
    let staleCopies = 0;
    for (const m of stream) {
      if (firstSeen.has(m.id)) {
        if (m.storedAt > (publishedAt.get(m.id) ?? Number.POSITIVE_INFINITY)) staleCopies++;
        continue;
      }
      firstSeen.add(m.id);
      if (m.version <= (lastVersion.get(m.key) ?? 0n)) streamOrderViolations++;
      lastVersion.set(m.key, m.version);
    }
    const inStreamTotal = (await jsm.streams.info(streamName)).state.messages;
    const v: Verdict = {
      committed: await count(`SELECT count(*)::text AS n FROM ${s}.outbox WHERE ${notPoison}`),
      inStream: inStreamTotal - poisonInStream,
      streamDistinct: new Set(stream.filter((m) => !(POISON_KEYS as readonly string[]).includes(m.key)).map((m) => m.id)).size,
      streamOrderViolations,
      staleCopies,
      applied: await count(`SELECT count(*)::text AS n FROM ${s}.effects`),
      appliedTwice: await count(`SELECT count(*)::text AS n FROM (SELECT 1 FROM ${s}.effects GROUP BY key, version HAVING count(*) > 1) d`),
      orderViolations: await count(
        `SELECT count(*)::text AS n FROM (SELECT version, lag(version) OVER (PARTITION BY key ORDER BY n) AS prev FROM ${s}.effects) e WHERE version <> prev + 1 OR (prev IS NULL AND version <> 1)`,
      ),
      published: sent.total,
      resent: sent.total - sent.ids.size,
      inboxDropped: consumers.reduce((n, c) => n + (c.reports.get('duplicate') ?? 0) + (c.reports.get('stale') ?? 0), 0),
      drainMs,
    };
    const parked = consumers.reduce((n, c) => n + (c.reports.get('parked') ?? 0), 0);
    const gaps = consumers.reduce((n, c) => n + (c.reports.get('gap') ?? 0), 0);
    const violations: string[] = [];
    const expected = o.events + LATE_KEYS * LATE_FIRST;
    if (v.committed !== expected) violations.push(`committed ${v.committed}, expected ${expected}`);
    if (v.staleCopies > 0) violations.push(`${v.staleCopies} stale copies stored after their row was marked published`);
    if (v.streamDistinct !== v.committed) violations.push(`stream holds ${v.streamDistinct} distinct events of ${v.committed}`);
    if (v.applied !== v.committed) violations.push(`${v.applied} effects for ${v.committed} committed events`);
    if (v.appliedTwice > 0) violations.push(`${v.appliedTwice} events applied twice`);
    if (v.orderViolations > 0 || v.streamOrderViolations > 0)
      violations.push(`per-key order violations: ${v.orderViolations} applied, ${v.streamOrderViolations} in the stream`);
    // Parking is expected now (late gaps, redeliveries after the gap timeout); staying parked is not.
    const leftParked = await count(`SELECT coalesce(sum(parked), 0)::text AS n FROM ${s}.inbox_versions`);
    const lateParked = await count(
      `SELECT count(*)::text AS n FROM ${quoteIdentifier(bossSchema)}.job WHERE name = 'ferry.inbox.chaos.parked' AND data->>'key' LIKE '${LATE_PREFIX}%'`,
    );
    if (leftParked > 0) violations.push(`${leftParked} events still parked`);
    if (lateParked < LATE_KEYS * 2) violations.push(`only ${lateParked} events of the late keys went through the parking lot`);
    if (poisonInStream > 0) violations.push(`${poisonInStream} events of the poison keys reached the stream`);
    if (!poisonHeld) violations.push(`the poison keys are not held at their first event: ${JSON.stringify(poison.rows)}`);

    const rows: Array<[string, string, string]> = [
      ['events committed', String(v.committed), ''],
      [
        'messages in the stream',
        String(v.inStream),
        `${v.inStream - v.streamDistinct} copies stored again (takeover re-sends outside the ${DUPLICATE_WINDOW_MS} ms duplicate window)`,
      ],
      ['stale copies', String(v.staleCopies), v.staleCopies === 0 ? 'ok (none stored after its row was marked)' : 'VIOLATION'],
      ['distinct events in the stream', String(v.streamDistinct), v.streamDistinct === v.committed ? 'ok' : 'VIOLATION'],
      [
        'effects applied',
        String(v.applied),
        v.applied === v.committed && v.appliedTwice === 0 ? 'ok (= committed, none twice)' : 'VIOLATION',
      ],
      [
        'per-key order violations',
        String(v.orderViolations + v.streamOrderViolations),
        v.orderViolations + v.streamOrderViolations === 0 ? 'ok' : 'VIOLATION',
      ],
      [
        'poison keys held at their first event',
        `${POISON_KEYS.length} x ${1 + POISON_BEHIND}`,
        poisonHeld && poisonInStream === 0 ? 'ok (unroutable backing off, oversized dead, nothing sent behind them)' : 'VIOLATION',
      ],
      ['messages the relays published', String(v.published), 'seen by a core subscription (a lower bound)'],
      ['duplicates dropped by the stream', String(v.resent), 'at least: re-sends of an id the tap saw before'],
      ['duplicates dropped by the inbox', String(v.inboxDropped), 'duplicate + stale reports'],
      ['inbox gap waits', String(gaps), 'sequential mode: early versions stored to wait'],
      [
        'events parked, left parked',
        `${parked}, ${leftParked}`,
        leftParked === 0 && lateParked >= LATE_KEYS * 2
          ? `ok (${lateParked} of the late keys; gap timeout ${GAP_TIMEOUT_MS} ms)`
          : 'VIOLATION',
      ],
      ['time to drain', `${(v.drainMs / 1000).toFixed(1)} s`, 'after the last commit'],
      ['processes SIGKILLed and restarted', String(faultLog.kills), ''],
      ['nats-server stops and restarts', String(faultLog.natsRestarts), ''],
      ['PostgreSQL backends terminated', String(faultLog.backendsTerminated), ''],
      [
        'processes paused (SIGSTOP)',
        String(faultLog.pauses),
        `${faultLog.pausesOverTerm} longer than the lease term (${LEASE_TERM_MS} ms)`,
      ],
      ['relays cut off (PostgreSQL or NATS)', String(faultLog.partitions), 'blackhole, then half-open (PostgreSQL) or healed (NATS)'],
      ['relay lease connections terminated', String(faultLog.leaseKills), 'the relay itself goes on running'],
      ['processes that exited on their own', String(procs.reduce((n, p) => n + p.unexpectedExits, 0)), 'restarted'],
      ['total time', `${((Date.now() - started) / 1000).toFixed(1)} s`, `seed ${o.seed}`],
    ];
    const w0 = Math.max(...rows.map((r) => r[0].length));
    const w1 = Math.max(...rows.map((r) => r[1].length));
    process.stdout.write(`\n${rows.map(([a, b, c]) => `${a.padEnd(w0)}  ${b.padStart(w1)}  ${c}`.trimEnd()).join('\n')}\n\n`);
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

/** Every message of the stream in stream order: id, key, version, and when it was stored (ms since the epoch). */
async function readStreamIds(
  nc: NatsConnection,
  stream: string,
): Promise<Array<{ id: string; key: string; version: bigint; storedAt: number }>> {
  const total = (await (await jetstreamManager(nc)).streams.info(stream)).state.messages;
  const consumer = await jetstream(nc).consumers.get(stream, { deliver_policy: DeliverPolicy.All });
  const out: Array<{ id: string; key: string; version: bigint; storedAt: number }> = [];
  const deadline = Date.now() + 120_000;
  while (out.length < total && Date.now() < deadline) {
    const batch = await consumer.fetch({ max_messages: Math.min(5000, total - out.length), expires: 2000 });
    for await (const m of batch) {
      out.push({
        id: m.headers?.get('ce-id') ?? '',
        key: m.headers?.get('ce-partitionkey') ?? '',
        version: BigInt(m.headers?.get('ce-sequence') || '0'),
        storedAt: m.info.timestampNanos / 1e6,
      });
    }
  }
  return out;
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
