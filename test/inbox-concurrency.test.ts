import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FerryEvent } from '@ferry/core';
import { createInbox, type Handler, type Inbox } from '@ferry/inbox';
import { natsUrl, waitFor } from '@ferry/testkit';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import pg from 'pg';
import { ferryEvent, type InboxFixture, inboxFixture, publishEvents } from './inbox-support.js';

/** Events in the race test: KEYS keys × VERSIONS versions. 10,000 fits the file's ~60 s budget on 2 cores. */
const KEYS = 100;
const VERSIONS = 100;
const EVENTS = KEYS * VERSIONS;

const cleanup: Array<() => Promise<unknown>> = [];
let f: InboxFixture;
after(async () => {
  for (const fn of cleanup.reverse()) await fn().catch(() => {});
  await f?.close();
});

describe('inbox under concurrency', () => {
  test('inbox - two instances on one durable consumer apply each (key, version) exactly once, in order, through duplicates and a full replay', async () => {
    f = await inboxFixture();
    // No unique constraint: a double apply must show up as a second row, not as a retried error.
    await f.db.pool.query(`CREATE TABLE ${f.s}.effect_log (seq bigserial PRIMARY KEY, key text NOT NULL, version bigint NOT NULL)`);
    const handler: Handler = async (event, { tx }) => {
      // Random delays, so the two instances interleave on every key.
      if (Math.random() < 0.05) await sleep(Math.floor(Math.random() * 5));
      await tx.query(`INSERT INTO ${f.s}.effect_log (key, version) VALUES ($1, $2)`, [event.key, event.version.toString()]);
      await tx.query(`INSERT INTO ${f.s}.state (key, version) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET version = excluded.version`, [
        event.key,
        event.version.toString(),
      ]);
    };
    const inboxes: Inbox[] = [];
    for (let i = 0; i < 2; i++) {
      // Each instance has a pool and a NATS connection of its own, as two processes would.
      const pool = new pg.Pool({ connectionString: f.db.url, max: 12 });
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
        mode: 'sequential',
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
    for (let v = 1; v <= VERSIONS; v++)
      for (let k = 0; k < KEYS; k++) events.push(ferryEvent(f.stream.prefix, { key: `k${k}`, version: v }));
    const twice: FerryEvent[] = [];
    for (const e of events) twice.push(e, e);
    // Every event twice in a row, the second copy with its own message id so JetStream keeps it.
    const js = f.stream.nc;
    const first = twice.filter((_, i) => i % 2 === 0);
    const second = twice.filter((_, i) => i % 2 === 1);
    await Promise.all([publishEvents(js, first), publishEvents(js, second, { msgIdSuffix: 'resend' })]);
    const settled = () => inboxes.reduce((n, i) => n + i.counts().applied + i.counts().stale + i.counts().duplicate, 0);
    await waitFor(() => settled() >= 2 * EVENTS, { what: `${2 * EVENTS} messages settled`, timeoutMs: 60_000, intervalMs: 100 });
    // Then the whole stream replayed.
    await publishEvents(js, events, { msgIdSuffix: 'replay' });
    await waitFor(() => settled() >= 3 * EVENTS, { what: `${3 * EVENTS} messages settled`, timeoutMs: 60_000, intervalMs: 100 });
    await Promise.all(inboxes.map((i) => i.stop()));

    const applied = inboxes.reduce((n, i) => n + i.counts().applied, 0);
    assert.equal(applied, EVENTS, 'applied exactly once per event');
    assert.ok(
      inboxes.every((i) => i.counts().applied > 0),
      'both instances did work',
    );
    const { rows: dup } = await f.db.pool.query(
      `SELECT key, version, count(*) FROM ${f.s}.effect_log GROUP BY key, version HAVING count(*) > 1`,
    );
    assert.deepEqual(dup, [], 'no (key, version) applied twice');
    const { rows: total } = await f.db.pool.query(`SELECT count(*)::int AS n FROM ${f.s}.effect_log`);
    assert.equal(total[0]?.n, EVENTS);
    // Sequential order: per key, versions applied as 1, 2, 3, … in commit order.
    const { rows: disorder } = await f.db.pool.query(
      `SELECT key FROM (SELECT key, version, row_number() OVER (PARTITION BY key ORDER BY seq) AS n FROM ${f.s}.effect_log) x WHERE version <> n LIMIT 5`,
    );
    assert.deepEqual(disorder, [], 'every key applied in version order');
    const { rows: state } = await f.db.pool.query(`SELECT count(*)::int AS n FROM ${f.s}.state WHERE version = ${VERSIONS}`);
    assert.equal(state[0]?.n, KEYS, 'every key ends at its last version');
    const { rows: parked } = await f.db.pool.query(`SELECT count(*)::int AS n FROM ${f.s}.inbox_versions WHERE parked > 0`);
    assert.equal(parked[0]?.n, 0);
  });
});
