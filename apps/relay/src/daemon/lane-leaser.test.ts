import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { quoteIdentifier, SILENT_LOGGER, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createTestDatabase, type TestDatabase } from '@ferry/testkit';
import { markFailedSql } from '../sql/mark-failed.js';
import { markPublishedSql } from '../sql/mark-published.js';
import { LaneLeaser, leaseSafetyMarginMs } from './lane-leaser.js';

// Leases with a term (outbox migration 000010), against the real database: the holder's own clock,
// the database's expiry, the epoch that fences a stale holder's marks.

const TERM_MS = 3000;

let db: TestDatabase;
let s: string;
const leasers: LaneLeaser[] = [];

before(async () => {
  db = await createTestDatabase({ prefix: 'lane_leaser', lanes: 4 });
  s = quoteIdentifier(db.schema);
});

after(async () => {
  for (const l of leasers) await l.stop();
  await db.close();
});

function leaser(instance: string): LaneLeaser {
  const l = new LaneLeaser({
    databaseUrl: db.url,
    schemaSql: s,
    instance,
    applicationName: `ferry-relay:${instance}`,
    lanesPerInstance: 'auto',
    leaseTermMs: TERM_MS,
    logger: SILENT_LOGGER,
  });
  leasers.push(l);
  return l;
}

describe('lane leases', () => {
  test('relay lanes - a holder that stops renewing loses its lanes by its own clock before the term ends, and another instance takes them after it', async () => {
    const a = leaser('aaaa0001');
    assert.deepEqual(await a.tick(), [0, 1, 2, 3]);
    const epochs = [0, 1, 2, 3].map((l) => a.epoch(l));
    assert.ok(
      epochs.every((e) => e === '1'),
      `first take: epoch 1, got ${epochs}`,
    );
    // B connects now, so that its tick after the sleep is one or two short statements inside the margin.
    const b = leaser('bbbb0002');
    assert.deepEqual(await b.tick(), [], 'nothing is free');
    // A is "frozen": no tick. Its clock gives the lanes up at term - margin; the database only at the term.
    await sleep(TERM_MS - leaseSafetyMarginMs(TERM_MS) + 50);
    assert.equal(a.holds(0), false, 'lost by its own clock');
    assert.deepEqual(a.lanes, []);
    const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${s}.relay_leases WHERE expires_at > now()`);
    assert.equal(rows[0]?.n, 4, 'the database still counts the term: nobody may take them yet');
    assert.deepEqual(await b.tick(), [], 'not before the term ends');
    await sleep(leaseSafetyMarginMs(TERM_MS) + 100);
    assert.deepEqual(await b.tick(), [0, 1, 2, 3], 'taken once the term ran out');
    assert.equal(b.epoch(0), '2', 'every take adds one to the epoch');
    // A wakes: its renewal finds the lanes under another epoch, and it holds nothing.
    assert.deepEqual(await a.tick(), []);
    assert.equal(a.epoch(0), undefined);
  });

  test('relay lanes - a mark or failure record under a stale epoch changes nothing; under the current one it marks', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'lease-test' });
    await withTransaction(db.pool, (tx) => publisher.publish(tx, { subject: 'lease.x', key: 'fenced', type: 'T', data: {} }));
    const { rows } = await db.pool.query<{ seq: string; lane: number }>(`SELECT seq::text, lane FROM ${s}.outbox WHERE key = 'fenced'`);
    const row = rows[0];
    assert.ok(row);
    const lease = await db.pool.query<{ owner: string; epoch: string }>(
      `SELECT owner, epoch::text FROM ${s}.relay_leases WHERE lane = $1`,
      [row.lane],
    );
    const { owner, epoch } = lease.rows[0] ?? { owner: '', epoch: '0' };
    const stale = String(Number(epoch) - 1);
    const failed = await db.pool.query(markFailedSql(s), [[row.seq], ['timeout: late'], [1000], [true], [stale], owner, [row.lane], [0]]);
    assert.equal(failed.rowCount, 0, 'a stale failure record neither counts an attempt nor kills the row');
    const other = await db.pool.query(markPublishedSql(s), [[row.seq], [epoch], 'someone-else', [row.lane]]);
    assert.equal(other.rowCount, 0, 'another owner marks nothing');
    const late = await db.pool.query(markPublishedSql(s), [[row.seq], [stale], owner, [row.lane]]);
    assert.equal(late.rowCount, 0, 'a stale mark changes nothing');
    const current = await db.pool.query(markPublishedSql(s), [[row.seq], [epoch], owner, [row.lane]]);
    assert.equal(current.rowCount, 1, 'the holder of the current epoch marks');
    const after = await db.pool.query<{ attempts: number; dead: boolean }>(
      `SELECT attempts, dead_at IS NOT NULL AS dead FROM ${s}.outbox_events WHERE seq = $1`,
      [row.seq],
    );
    assert.deepEqual(after.rows[0], { attempts: 0, dead: false });
  });

  test('relay lanes - an instance whose own term ran out takes its lanes back under a new epoch', async () => {
    for (const l of leasers.splice(0)) await l.stop();
    const g = leaser('gggg0007');
    assert.deepEqual(await g.tick(), [0, 1, 2, 3]);
    const before = g.epoch(0);
    // No renewal for a whole term (a loaded machine, a long pause): its clock drops the lanes, the database expires them.
    await sleep(TERM_MS + 100);
    assert.deepEqual(g.lanes, []);
    assert.deepEqual(await g.tick(), [0, 1, 2, 3], 'no other instance is there to take them: it must');
    assert.equal(g.epoch(0), String(Number(before) + 1), 'under a new epoch: marks of the old grant change nothing');
  });

  test('relay lanes - a stopping instance takes no lane and gives up each one once nothing is in flight on it', async () => {
    for (const l of leasers.splice(0)) await l.stop();
    const e = leaser('eeee0005');
    const f = leaser('ffff0006');
    await e.tick();
    await f.tick();
    await sleep(TERM_MS / 3 + 50); // renewals count two live instances: each keeps its share of 2
    await e.tick();
    await f.tick();
    await e.tick();
    assert.equal(e.lanes.length, 2);
    assert.equal(f.lanes.length, 2);
    const busyLane = e.lanes[0] as number;
    e.drain();
    assert.deepEqual(await e.tick((lane) => lane === busyLane), [busyLane], 'the idle lane goes at once, the busy one stays');
    await f.stop(); // its lanes are free now: a stopping instance must not take them
    assert.deepEqual(await e.tick((lane) => lane === busyLane), [busyLane]);
    assert.deepEqual(await e.tick(), [], 'the busy lane goes once its chains ended');
    const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${s}.relay_leases WHERE owner IS NOT NULL`);
    assert.equal(rows[0]?.n, 0, 'no lane is held by anyone');
  });

  test('relay lanes - an instance that is not healthy (NATS unreachable) releases its lanes and leaves the live count', async () => {
    for (const l of leasers.splice(0)) await l.stop();
    let healthy = true;
    const c = new LaneLeaser({
      databaseUrl: db.url,
      schemaSql: s,
      instance: 'cccc0003',
      applicationName: 'ferry-relay:cccc0003',
      lanesPerInstance: 'auto',
      leaseTermMs: TERM_MS,
      healthy: () => healthy,
      logger: SILENT_LOGGER,
    });
    leasers.push(c);
    const d = leaser('dddd0004');
    await c.tick();
    await d.tick();
    assert.equal(c.lanes.length + d.lanes.length, 4);
    healthy = false;
    assert.deepEqual(await c.tick(), []);
    const live = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${s}.relay_instances WHERE instance = 'cccc0003'`);
    assert.equal(live.rows[0]?.n, 0, 'its heartbeat is gone');
    await sleep(TERM_MS / 3 + 50); // d's next renewal counts the live instances again
    assert.deepEqual(await d.tick(), [0, 1, 2, 3], 'the healthy instance takes them on its next tick');
  });
  test('relay lanes - the fenced marks find their rows by the primary key, with fresh or stale statistics', async () => {
    // Stale: a table just truncated and filled, as at a first deploy or in a benchmark. Joined with the lease rows,
    // the mark was planned as a walk over every pending row of the instance's lanes, per mark (O(backlog)).
    // The marks act on the narrow tables (outbox migration 000015): the truncate empties them too (by trigger),
    // and the insert fills outbox_pending (by trigger), none of them analyzed since.
    await db.pool.query(`TRUNCATE ${s}.outbox, ${s}.key_versions`);
    await db.pool.query(
      `INSERT INTO ${s}.outbox (id, key, version, subject, type, source, content_type, data, occurred_at)
       SELECT gen_random_uuid(), 'plan-' || (g % 500), g / 500 + 1, 'lease.plan', 'T', 'test', 'application/json',
              convert_to('{}', 'UTF8'), now()
         FROM generate_series(0, 19999) g`,
    );
    const { rows } = await db.pool.query<{ seq: string; lane: number }>(`SELECT seq::text, lane FROM ${s}.outbox ORDER BY seq LIMIT 2000`);
    const seqs = rows.map((r) => r.seq);
    const lanes = rows.map((r) => r.lane);
    const epochs = rows.map(() => '1');
    const client = await db.pool.connect();
    try {
      const plans: string[] = [];
      for (const fresh of [false, true]) {
        if (fresh) await client.query(`ANALYZE ${s}.outbox, ${s}.outbox_pending, ${s}.outbox_published`);
        for (const [name, text, values] of [
          ['mark_published', markPublishedSql(s), [seqs, epochs, 'owner', lanes]],
          [
            'mark_failed',
            markFailedSql(s),
            [seqs, seqs.map(() => 'x'), seqs.map(() => 1), seqs.map(() => false), epochs, 'owner', lanes, seqs.map(() => 0)],
          ],
        ] as const) {
          await client.query(`DEALLOCATE ALL`);
          await client.query(`PREPARE ${name} AS ${text}`);
          // EXPLAIN EXECUTE takes no bind parameters: the values as literals (plain numbers, booleans and words).
          const args = values.map((v) => (Array.isArray(v) ? `'{${v.join(',')}}'` : `'${v}'`)).join(', ');
          const { rows: plan } = await client.query(`EXPLAIN (FORMAT JSON) EXECUTE ${name}(${args})`);
          const json = JSON.stringify(plan[0]);
          plans.push(json);
          const label = `${name}, ${fresh ? 'fresh' : 'stale'} statistics`;
          assert.match(json, /"Index Name":"outbox_pending_pkey"/, `${label}: pending rows found by seq`);
          assert.doesNotMatch(json, /outbox_pending_(walk|failed)_idx/, `${label}: never a walk over the pending rows`);
          assert.doesNotMatch(
            json,
            /"Node Type":"Seq Scan","Parent Relationship":"[^"]*","Parallel Aware":false,"Async Capable":false,"Relation Name":"outbox(_pending|_published)?"/,
            label,
          );
        }
      }
      assert.equal(plans.length, 4);
    } finally {
      await client.query('DEALLOCATE ALL');
      client.release();
    }
  });
});
