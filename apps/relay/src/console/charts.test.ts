import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { quoteIdentifier, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createTestDatabase, type TestDatabase } from '@ferry/testkit';
import { CHART_MINUTES, MinuteHistory, minuteCharts } from './charts.js';

// The overview's charts: events published per minute and their insert → published latency, read
// from the outbox minute by minute, finished minutes once.

let db: TestDatabase;
let s: string;

before(async () => {
  db = await createTestDatabase({ prefix: 'console_charts', lanes: 2 });
  s = quoteIdentifier(db.schema);
});
after(async () => {
  await db.close();
});

const MINUTE = 60_000;

/** Publishes `n` events and marks them published `agoMs` before now, `latencyMs` after their insert. */
async function publishedAgo(n: number, agoMs: number, latencyMs: number): Promise<void> {
  const publisher = createPublisher({ schema: db.schema, source: 'charts-test' });
  const ids = await withTransaction(db.pool, async (tx) =>
    (
      await publisher.publishMany(
        tx,
        Array.from({ length: n }, (_, i) => ({ subject: 'charts.x', key: `k${i}`, type: 'T', data: {} })),
      )
    ).map((r) => r.id),
  );
  // One statement (one now()): the insert time on the event row, the mark as the relay's (outbox migration 000015).
  await db.pool.query(
    `WITH inserted AS (
       UPDATE ${s}.outbox SET created_at = now() - make_interval(secs => ($2::float8 + $3::float8) / 1000) WHERE id = ANY ($1::uuid[])
       RETURNING seq),
     gone AS (DELETE FROM ${s}.outbox_pending p WHERE p.seq IN (SELECT i.seq FROM inserted i) RETURNING p.seq, p.attempts, p.last_error)
     INSERT INTO ${s}.outbox_published (seq, published_at, attempts, last_error)
     SELECT g.seq, now() - make_interval(secs => $2::float8 / 1000), g.attempts, g.last_error FROM gone g`,
    [ids, agoMs, latencyMs],
  );
}

test('console charts - per-minute counts and latency percentiles of the last hour; finished minutes are kept, later rows in them not read again', async () => {
  const { rows } = await db.pool.query<{ now: Date }>('SELECT now() AS now');
  const now = (rows[0] as { now: Date }).now.getTime();
  const current = Math.floor(now / MINUTE) * MINUTE;
  // 5 events 3 minutes ago at 40 ms, 2 events 10 minutes ago at 2 s, 4 events 2 hours ago (outside the hour).
  await publishedAgo(5, now - (current - 3 * MINUTE + 20_000), 40);
  await publishedAgo(2, now - (current - 10 * MINUTE + 5_000), 2_000);
  await publishedAgo(4, 2 * 3600_000, 10);
  // A discarded row (dead_at kept, published_at set) is not a publish.
  await publishedAgo(1, now - (current - 3 * MINUTE + 30_000), 40);
  await db.pool.query(`UPDATE ${s}.outbox_published SET dead_at = published_at WHERE seq = (SELECT max(seq) FROM ${s}.outbox)`);

  const history = new MinuteHistory(db.pool, db.schema);
  const newest = () => history.newestFinal;
  assert.equal(newest(), undefined, 'no whole minute read yet');
  const minutes = await history.read(now);
  // The overview's "published, last full minute": the newest minute read once over (and settled), never the current one.
  const settled = Math.floor((now - 10_000) / MINUTE) * MINUTE - MINUTE;
  assert.equal(newest()?.minute, settled);
  assert.equal(minutes.length, CHART_MINUTES);
  assert.equal(minutes.at(-1)?.minute, current, 'the current minute last');
  const at = (ago: number) => minutes.find((m) => m.minute === current - ago * MINUTE);
  assert.deepEqual(at(3), { minute: current - 3 * MINUTE, published: 5, p50Ms: 40, p99Ms: 40 });
  assert.equal(at(10)?.published, 2);
  assert.equal(Math.round(at(10)?.p99Ms ?? 0), 2000);
  assert.equal(
    minutes.reduce((n, m) => n + m.published, 0),
    7,
    'nothing from two hours ago, no discarded row',
  );

  // Minute -3 is final: a row marked in it later is not read again (each refresh reads only the recent minutes).
  await publishedAgo(3, now - (current - 3 * MINUTE + 10_000), 40);
  const again = await history.read(now + 1000);
  assert.equal(again.find((m) => m.minute === current - 3 * MINUTE)?.published, 5);
  // A new history reads it in full.
  const fresh = await new MinuteHistory(db.pool, db.schema).read(now + 1000);
  assert.equal(fresh.find((m) => m.minute === current - 3 * MINUTE)?.published, 8);

  const svg = minuteCharts(fresh).value;
  assert.match(svg, /<b id="chart-total">10<\/b>/);
  assert.equal((svg.match(/<g data-minute=/g) ?? []).length, 2 * CHART_MINUTES, 'a bar per minute in each chart');
  assert.doesNotMatch(svg, /style=|<script/, 'nothing the CSP would refuse');
});
