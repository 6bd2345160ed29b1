// Issue 29: restarts stall nothing. `inbox.stop()` settles every message it
// was handed (applied and acked), so a rolling restart of two instances under
// load leaves no message waiting out `ack_wait`, in every mode. ack_wait is
// 120 s here: a message stranded by a stop (what nats.js's plain stop() did:
// 1-2 per mode per run, `num_ack_pending` stuck, never redelivered) cannot be
// settled within the 60 s bound; without one the backlog settles in seconds
// (sequential, the slowest, ~23 s on a box at load 20).
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createInbox, type Handler, type Inbox, type InboxMode } from '@ferry/inbox';
import { natsUrl } from '@ferry/testkit';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';
import { ferryEvent, type InboxFixture, inboxFixture, publishEvents } from './inbox-support.js';

const KEYS = 10;
const ACK_WAIT_MS = 120_000;
/** Half the ack wait: a message stranded by a stop cannot be settled by then. */
const SETTLE_BOUND_MS = 60_000;

const fixtures: InboxFixture[] = [];
after(async () => {
  for (const f of fixtures) await f.close();
});

interface Instance {
  inbox: Inbox;
  stop(): Promise<void>;
}

async function instance(f: InboxFixture, mode: InboxMode, name: string): Promise<Instance> {
  const pool = new pg.Pool({ connectionString: f.db.url, max: 4 });
  const nc = await connect({ servers: natsUrl(), name });
  const handler: Handler = async (event, { tx }) => {
    await tx.query(`INSERT INTO ${f.s}.effect_log (key, version) VALUES ($1, $2)`, [event.key, event.version.toString()]);
    await tx.query(
      `INSERT INTO ${f.s}.state (key, version) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET version = greatest(state.version, excluded.version)`,
      [event.key, event.version.toString()],
    );
  };
  const inbox = createInbox({
    pool,
    nc,
    stream: f.stream.name,
    consumer: 'billing',
    schema: f.db.schema,
    bossSchema: f.bossSchema,
    mode,
    ackWaitMs: ACK_WAIT_MS,
    pullExpiresMs: 2_000,
    concurrency: 8,
    maxAckPending: 32,
    gapRetryMs: 20,
    handlers: { Set: handler },
  });
  await inbox.start();
  return {
    inbox,
    async stop() {
      // As documented: stop the inbox, then drain the connection.
      await inbox.stop();
      await nc.drain();
      await pool.end();
    },
  };
}

async function rollingRestart(mode: InboxMode): Promise<{ settledMs: number; events: number; applied: number; stops: number[] }> {
  const f = await inboxFixture();
  fixtures.push(f);
  await f.db.pool.query(`CREATE TABLE ${f.s}.effect_log (seq bigserial PRIMARY KEY, key text NOT NULL, version bigint NOT NULL)`);
  const instances = [await instance(f, mode, 'a'), await instance(f, mode, 'b')];
  // Load: every key gets its next version every ~20 ms until the restarts are over.
  const stops: number[] = [];
  let version = 0;
  let publishing = true;
  const load = (async () => {
    while (publishing) {
      version++;
      const batch = [];
      for (let k = 0; k < KEYS; k++) batch.push(ferryEvent(f.stream.prefix, { key: `k${k}`, version }));
      await publishEvents(f.stream.nc, batch);
      await sleep(40);
    }
  })();
  try {
    for (let i = 0; i < instances.length; i++) {
      await sleep(700);
      const t0 = Date.now();
      await instances[i]?.stop();
      stops.push(Date.now() - t0);
      instances[i] = await instance(f, mode, `${i === 0 ? 'a' : 'b'}2`);
    }
    await sleep(500);
  } finally {
    publishing = false;
    await load;
  }
  const loadEnded = Date.now();
  const events = version * KEYS;
  let settledMs = -1;
  let last = '';
  while (Date.now() - loadEnded < SETTLE_BOUND_MS) {
    const info = await f.stream.jsm.consumers.info(f.stream.name, 'billing');
    const { rows } = await f.db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${f.s}.state WHERE version = $1`, [version]);
    last = `num_pending ${info.num_pending}, num_ack_pending ${info.num_ack_pending}, redelivered ${info.num_redelivered}, keys at the last version ${rows[0]?.n}/${KEYS}`;
    if (info.num_pending === 0 && info.num_ack_pending === 0 && rows[0]?.n === KEYS) {
      settledMs = Date.now() - loadEnded;
      break;
    }
    await sleep(100);
  }
  const { rows } = await f.db.pool.query<{ n: number; doubled: number }>(
    `SELECT count(*)::int AS n, (count(*) - count(DISTINCT (key, version)))::int AS doubled FROM ${f.s}.effect_log`,
  );
  last += `, in flight ${instances.map((i) => i.inbox.inFlight()).join('/')}, applied ${rows[0]?.n}`;
  for (const i of instances) await i.stop();
  assert.equal(rows[0]?.doubled, 0, `${mode}: no (key, version) applied twice`);
  assert.ok(
    settledMs >= 0 && settledMs <= SETTLE_BOUND_MS,
    `${mode}: every message of ${events} settled within ${SETTLE_BOUND_MS} ms of the load's end (took ${settledMs < 0 ? `more than ${SETTLE_BOUND_MS}` : settledMs} ms; ack_wait ${ACK_WAIT_MS} ms; ${last})`,
  );
  return { settledMs, events, applied: rows[0]?.n ?? 0, stops };
}

describe('inbox restarts', () => {
  for (const mode of ['sequential', 'latest', 'dedupe'] as const) {
    test(`inbox - ${mode}: a rolling restart of two instances under load leaves no message waiting out ack_wait`, async (t) => {
      const r = await rollingRestart(mode);
      t.diagnostic(
        `${mode}: ${r.events} events, ${r.applied} applied, settled ${r.settledMs} ms after the load ended; stops took ${r.stops.join(', ')} ms`,
      );
      if (mode !== 'latest') assert.equal(r.applied, r.events, `${mode}: every event applied once`);
    });
  }
});
