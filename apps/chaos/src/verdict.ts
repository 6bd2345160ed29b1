// The chaos run's checks (one job): once the processes have stopped, reads the stream back and the
// database, measures loss, copies, order, poison and parking, and lists every violation.
import { quoteIdentifier } from '@ferry/core';
import { DeliverPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type pg from 'pg';
import { LATE_FIRST, LATE_KEYS, LATE_PREFIX, POISON_BEHIND, POISON_KEYS } from './plan.js';
import type { Supervised } from './supervised.js';

/** A condition on `key`: every key but the poison ones. */
export const NOT_POISON_SQL = `key <> ALL ('{${POISON_KEYS.join(',')}}'::text[])`;

/** The number a statement returns as `n` (text). */
export async function count(pool: pg.Pool, sql: string): Promise<number> {
  return Number((await pool.query<{ n: string }>(sql)).rows[0]?.n ?? 0);
}

export interface Verdict {
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
  /** Events of the poison keys in the stream (none expected). */
  poisonInStream: number;
  /** Each poison key blocked at its first event, with nothing behind it tried. */
  poisonHeld: boolean;
  parked: number;
  gaps: number;
  leftParked: number;
  /** Events of the late keys that went through the parking lot. */
  lateParked: number;
}

export interface VerdictInput {
  pool: pg.Pool;
  nc: NatsConnection;
  streamName: string;
  schema: string;
  bossSchema: string;
  consumers: readonly Supervised[];
  /** What a core subscription saw the relays publish: every message, and the distinct ids. */
  sent: { total: number; ids: Set<string> };
  /** The events the writers were asked to commit (`--events`). */
  events: number;
  drainMs: number;
}

export async function judge(i: VerdictInput): Promise<{ verdict: Verdict; violations: string[] }> {
  const { pool } = i;
  const s = quoteIdentifier(i.schema);
  const stream = await readStreamIds(i.nc, i.streamName);
  const poisonInStream = stream.filter((m) => (POISON_KEYS as readonly string[]).includes(m.key)).length;
  const poison = await pool.query<{ key: string; version: string; attempts: number; dead: boolean; published: boolean }>(
    `SELECT key, version::text, attempts, dead_at IS NOT NULL AS dead, published_at IS NOT NULL AS published
       FROM ${s}.outbox_events WHERE NOT (${NOT_POISON_SQL}) ORDER BY key, outbox_events.version`, // the bigint: 10 after 9
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
  const inStreamTotal = (await (await jetstreamManager(i.nc)).streams.info(i.streamName)).state.messages;
  const reports = (name: string) => i.consumers.reduce((n, c) => n + (c.reports.get(name) ?? 0), 0);
  const v: Verdict = {
    committed: await count(pool, `SELECT count(*)::text AS n FROM ${s}.outbox WHERE ${NOT_POISON_SQL}`),
    inStream: inStreamTotal - poisonInStream,
    streamDistinct: new Set(stream.filter((m) => !(POISON_KEYS as readonly string[]).includes(m.key)).map((m) => m.id)).size,
    streamOrderViolations,
    staleCopies,
    applied: await count(pool, `SELECT count(*)::text AS n FROM ${s}.effects`),
    appliedTwice: await count(
      pool,
      `SELECT count(*)::text AS n FROM (SELECT 1 FROM ${s}.effects GROUP BY key, version HAVING count(*) > 1) d`,
    ),
    orderViolations: await count(
      pool,
      `SELECT count(*)::text AS n FROM (SELECT version, lag(version) OVER (PARTITION BY key ORDER BY n) AS prev FROM ${s}.effects) e WHERE version <> prev + 1 OR (prev IS NULL AND version <> 1)`,
    ),
    published: i.sent.total,
    resent: i.sent.total - i.sent.ids.size,
    inboxDropped: reports('duplicate') + reports('stale'),
    drainMs: i.drainMs,
    poisonInStream,
    poisonHeld,
    parked: reports('parked'),
    gaps: reports('gap'),
    // Parking is expected now (late gaps, redeliveries after the gap timeout); staying parked is not.
    leftParked: await count(pool, `SELECT coalesce(sum(parked), 0)::text AS n FROM ${s}.inbox_versions`),
    lateParked: await count(
      pool,
      `SELECT count(*)::text AS n FROM ${quoteIdentifier(i.bossSchema)}.job WHERE name = 'ferry.inbox.chaos.parked' AND data->>'key' LIKE '${LATE_PREFIX}%'`,
    ),
  };
  const violations: string[] = [];
  const expected = i.events + LATE_KEYS * LATE_FIRST;
  if (v.committed !== expected) violations.push(`committed ${v.committed}, expected ${expected}`);
  if (v.staleCopies > 0) violations.push(`${v.staleCopies} stale copies stored after their row was marked published`);
  if (v.streamDistinct !== v.committed) violations.push(`stream holds ${v.streamDistinct} distinct events of ${v.committed}`);
  if (v.applied !== v.committed) violations.push(`${v.applied} effects for ${v.committed} committed events`);
  if (v.appliedTwice > 0) violations.push(`${v.appliedTwice} events applied twice`);
  if (v.orderViolations > 0 || v.streamOrderViolations > 0)
    violations.push(`per-key order violations: ${v.orderViolations} applied, ${v.streamOrderViolations} in the stream`);
  if (v.leftParked > 0) violations.push(`${v.leftParked} events still parked`);
  if (v.lateParked < LATE_KEYS * 2) violations.push(`only ${v.lateParked} events of the late keys went through the parking lot`);
  if (poisonInStream > 0) violations.push(`${poisonInStream} events of the poison keys reached the stream`);
  if (!poisonHeld) violations.push(`the poison keys are not held at their first event: ${JSON.stringify(poison.rows)}`);
  return { verdict: v, violations };
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
