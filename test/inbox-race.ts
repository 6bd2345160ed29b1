import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FerryEvent } from '@ferry/core';
import { createInbox, type Handler, type Inbox, type InboxMode } from '@ferry/inbox';
import { natsUrl, waitFor } from '@ferry/testkit';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import pg from 'pg';
import { ferryEvent, type InboxFixture, inboxFixture, publishEvents } from './inbox-support.js';

// The two-instance race of the inbox concurrency tests.

/**
 * The race of the issue, in `sequential` mode: 100 keys × 50 versions = 5,000
 * events (15,000 messages with the copies and the replay). The issue asks for
 * 10,000: that took 30-35 s alone on the 2-core machine but over 60 s inside
 * the full suite, so the count is this constant; `RACE_VERSIONS=100` runs the
 * full 10,000. `latest` and `dedupe` run the same race with 2,000 events.
 */
export const FULL = { keys: 100, versions: Number(process.env.RACE_VERSIONS ?? 50) };
export const SMALL = { keys: 40, versions: 50 };

const cleanup: Array<() => Promise<unknown>> = [];
const fixtures: InboxFixture[] = [];
/** Call from the test file's `after()`. */
export async function closeRaces(): Promise<void> {
  for (const fn of cleanup.reverse()) await fn().catch(() => {});
  for (const f of fixtures) await f.close();
}

/**
 * Waits until `target` messages settled, up to 120 s. On a timeout the error
 * says whether the instances were slow or stuck: how many settled, each
 * instance's counts and messages in flight, the keys not yet at their last
 * version and the early versions stored.
 */
async function settle(f: InboxFixture, inboxes: Inbox[], settled: () => number, target: number, versions: number): Promise<void> {
  try {
    await waitFor(() => settled() >= target, { what: `${target} messages settled`, timeoutMs: 120_000, intervalMs: 100 });
  } catch (err) {
    const behind = await f.db.pool
      .query<{ keys: string; early: string }>(
        `SELECT (SELECT count(*) FROM ${f.s}.inbox_versions WHERE consumer = 'billing' AND version < $1)::text AS keys,
                (SELECT count(*) FROM ${f.s}.inbox_early WHERE consumer = 'billing')::text AS early`,
        [versions],
      )
      .then((r) => r.rows[0])
      .catch((e: unknown) => ({ keys: `? (${String(e)})`, early: '?' }));
    const each = inboxes.map((i, n) => `instance ${n}: ${JSON.stringify(i.counts())}, ${i.inFlight()} in flight`).join('; ');
    throw new Error(
      `${(err as Error).message}: ${settled()} settled; ${each}; keys with a recorded version below ${versions}: ${behind?.keys}; early versions stored: ${behind?.early}`,
    );
  }
}

export interface RaceResult {
  f: InboxFixture;
  inboxes: Inbox[];
  events: number;
  keys: number;
  versions: number;
}

/**
 * Two inbox instances (each with its own pool and NATS connection, as two
 * processes) on one durable consumer; every event published twice in a row
 * (the copy with its own message id, so JetStream keeps it), then the whole
 * stream replayed; handlers with random delays. Resolves once all 3 × events
 * messages settled and both instances stopped.
 */
export async function race(mode: InboxMode, size: { keys: number; versions: number }): Promise<RaceResult> {
  const f = await inboxFixture();
  fixtures.push(f);
  // No unique constraint: a double apply must show up as a second row, not as a retried error.
  await f.db.pool.query(`CREATE TABLE ${f.s}.effect_log (seq bigserial PRIMARY KEY, key text NOT NULL, version bigint NOT NULL)`);
  const handler: Handler = async (event, { tx }) => {
    if (Math.random() < 0.05) await sleep(Math.floor(Math.random() * 5));
    await tx.query(`INSERT INTO ${f.s}.effect_log (key, version) VALUES ($1, $2)`, [event.key, event.version.toString()]);
    await tx.query(`INSERT INTO ${f.s}.state (key, version) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET version = excluded.version`, [
      event.key,
      event.version.toString(),
    ]);
  };
  const inboxes: Inbox[] = [];
  for (let i = 0; i < 2; i++) {
    const pool = new pg.Pool({ connectionString: f.db.url, max: 8 });
    const nc: NatsConnection = await connect({ servers: natsUrl(), name: `inbox-${i}` });
    cleanup.push(
      () => pool.end(),
      () => nc.close(),
    );
    const inbox = createInbox({
      pool,
      nc,
      stream: f.stream.name,
      consumer: 'billing',
      schema: f.db.schema,
      bossSchema: f.bossSchema,
      mode,
      concurrency: 16,
      maxAckPending: 64,
      gapRetryMs: 20,
      handlers: { Set: handler },
    });
    cleanup.push(() => inbox.stop());
    inboxes.push(inbox);
  }
  await Promise.all(inboxes.map((i) => i.start()));
  const events: FerryEvent[] = [];
  for (let v = 1; v <= size.versions; v++) {
    for (let k = 0; k < size.keys; k++) events.push(ferryEvent(f.stream.prefix, { key: `k${k}`, version: v }));
  }
  const n = events.length;
  const js = f.stream.nc;
  await Promise.all([publishEvents(js, events), publishEvents(js, events, { msgIdSuffix: 'resend' })]);
  const settled = () => inboxes.reduce((sum, i) => sum + i.counts().applied + i.counts().stale + i.counts().duplicate, 0);
  await settle(f, inboxes, settled, 2 * n, size.versions);
  await publishEvents(js, events, { msgIdSuffix: 'replay' });
  await settle(f, inboxes, settled, 3 * n, size.versions);
  await Promise.all(inboxes.map((i) => i.stop()));
  assert.equal(settled(), 3 * n, 'every message settled exactly once');
  assert.ok(
    inboxes.every((i) => i.counts().applied > 0),
    'both instances did work',
  );
  return { f, inboxes, events: n, ...size };
}

export async function assertNoDoubleApply(r: RaceResult): Promise<number> {
  const { rows: dup } = await r.f.db.pool.query(
    `SELECT key, version, count(*) FROM ${r.f.s}.effect_log GROUP BY key, version HAVING count(*) > 1`,
  );
  assert.deepEqual(dup, [], 'no (key, version) applied twice');
  const { rows } = await r.f.db.pool.query(`SELECT count(*)::int AS n FROM ${r.f.s}.effect_log`);
  const applied = r.inboxes.reduce((sum, i) => sum + i.counts().applied, 0);
  assert.equal(rows[0]?.n, applied, 'one effect row per applied message');
  return applied;
}

export async function assertFinalState(r: RaceResult): Promise<void> {
  const { rows } = await r.f.db.pool.query(`SELECT count(*)::int AS n FROM ${r.f.s}.state WHERE version = ${r.versions}`);
  assert.equal(rows[0]?.n, r.keys, 'every key ends at its last version');
}
