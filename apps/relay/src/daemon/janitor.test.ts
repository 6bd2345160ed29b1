import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import {
  isConflictError,
  isMigrationError,
  quoteIdentifier,
  RELAY_FLOOR_SETTING,
  RELAY_PROTOCOL,
  SILENT_LOGGER,
  withTransaction,
} from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createTestDatabase, type TestDatabase } from '@ferry/testkit';
import { prunePublishedSql } from '../sql/prune-published.js';
import { setRetentionSql } from '../sql/retention.js';
import type { Logger } from '../types.js';
import { Janitor } from './janitor.js';

// The prune job and idempotent re-publish (issue 14 item 6): an id published, pruned and
// published again is recognised as the stored event for another retention after the prune.

const silent: Logger = SILENT_LOGGER;

let db: TestDatabase;
let s: string;
before(async () => {
  db = await createTestDatabase({ prefix: 'janitor', max: 6 });
  s = quoteIdentifier(db.schema);
  // The outbox's own retention is what every prune run uses (one minute here).
  await db.pool.query(setRetentionSql(s), [60_000]);
});
after(() => db.close());

function janitor(retentionMs: number, logger: Logger = silent): Janitor {
  return new Janitor({
    databaseUrl: db.url,
    pool: db.pool,
    schema: db.schema,
    schemaSql: s,
    applicationName: 'janitor-test',
    retentionMs,
    pruneCron: '* * * * *',
    pruneBatchSize: 2,
    cronMonitorIntervalSeconds: 1,
    logger,
    onPrune: () => {},
  });
}

const ev = (id: string, key: string, data: unknown = { n: 1 }) => ({ id, subject: 'orders.placed', key, type: 'T', data });

async function rowsOf(key: string): Promise<number[]> {
  const { rows } = await db.pool.query<{ v: number }>(`SELECT version::int AS v FROM ${s}.outbox o WHERE key = $1 ORDER BY o.seq`, [key]);
  return rows.map((r) => r.v);
}

/**
 * Marks every row published an hour ago, so a one-minute retention prunes them: each pending row is
 * marked as the relay's mark does (outbox migration 000015), and each published one dated back.
 */
const publishedLongAgo = async () => {
  await db.pool.query(
    `WITH gone AS (DELETE FROM ${s}.outbox_pending p RETURNING p.seq, p.attempts, p.last_error)
     INSERT INTO ${s}.outbox_published (seq, attempts, last_error) SELECT g.seq, g.attempts, g.last_error FROM gone g`,
  );
  await db.pool.query(`UPDATE ${s}.outbox_published SET published_at = now() - interval '1 hour'`);
};

describe('janitor', () => {
  test('janitor - an id published again after its row was pruned is existing, with its version and seq; other content is a conflict', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    const x = randomUUID();
    const first = await withTransaction(db.pool, (tx) => publisher.publish(tx, ev(x, 'idem')));
    await withTransaction(db.pool, (tx) => publisher.publishMany(tx, [ev(randomUUID(), 'idem'), ev(randomUUID(), 'other')]));
    await publishedLongAgo();
    assert.equal(await janitor(60_000).prune(), 3);
    assert.deepEqual(await rowsOf('idem'), []);

    const again = await withTransaction(db.pool, (tx) => publisher.publish(tx, ev(x, 'idem')));
    assert.deepEqual(
      { existing: again.existing, version: again.version, seq: again.seq },
      { existing: true, version: first.version, seq: first.seq },
    );
    assert.deepEqual(await rowsOf('idem'), [], 'nothing stored again');
    await assert.rejects(
      withTransaction(db.pool, (tx) => publisher.publish(tx, ev(x, 'idem', { n: 2 }))),
      isConflictError,
    );
    await assert.rejects(
      withTransaction(db.pool, (tx) => publisher.publish(tx, { ...ev(x, 'idem'), version: 7 })),
      isConflictError,
    );

    // In a batch: the recognised id comes back existing, the new one is stored after it.
    const y = randomUUID();
    const batch = await withTransaction(db.pool, (tx) => publisher.publishMany(tx, [ev(x, 'idem'), ev(y, 'idem')]));
    assert.deepEqual(
      batch.map((r) => [r.existing, r.version]),
      [
        [true, 1n],
        [false, 3n],
      ],
    );
    // A conflict with a recognised id writes nothing for the whole batch.
    await assert.rejects(
      withTransaction(db.pool, (tx) => publisher.publishMany(tx, [ev(randomUUID(), 'idem'), ev(x, 'idem', { n: 3 })])),
      isConflictError,
    );
    assert.deepEqual(await rowsOf('idem'), [3]);
  });

  test('janitor - a pruned id is forgotten one retention after its prune, not before', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    const z = randomUUID();
    await withTransaction(db.pool, (tx) => publisher.publish(tx, ev(z, 'forget')));
    await publishedLongAgo();
    await janitor(60_000).prune();
    await janitor(60_000).prune(); // pruned a moment ago: kept
    assert.equal((await withTransaction(db.pool, (tx) => publisher.publish(tx, ev(z, 'forget')))).existing, true);
    await db.pool.query(`UPDATE ${s}.published_ids SET pruned_at = now() - interval '2 minutes' WHERE id = $1`, [z]);
    await janitor(60_000).prune();
    const { rows } = await db.pool.query(`SELECT 1 FROM ${s}.published_ids WHERE id = $1`, [z]);
    assert.equal(rows.length, 0, 'forgotten after the retention');
  });

  test('janitor - a prune run uses the retention stored with the outbox, not the retention of the instance running it', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    await withTransaction(db.pool, (tx) =>
      publisher.publishMany(
        tx,
        Array.from({ length: 5 }, () => ev(randomUUID(), 'ret')),
      ),
    );
    await publishedLongAgo(); // one hour ago
    await db.pool.query(setRetentionSql(s), [7 * 86_400_000]);
    await janitor(1).prune(); // this instance was started with 1 ms
    assert.deepEqual(await rowsOf('ret'), [1, 2, 3, 4, 5], 'the 7-day outbox retention keeps rows one hour old');
    await db.pool.query(setRetentionSql(s), [30 * 60_000]);
    await janitor(7 * 86_400_000).prune();
    assert.deepEqual(await rowsOf('ret'), [], 'a 30-minute outbox retention prunes them, whatever this instance says');
  });

  test('janitor - a relay below the relay floor prunes nothing, in its check and in the delete itself', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    await withTransaction(db.pool, (tx) => publisher.publishMany(tx, [ev(randomUUID(), 'floor'), ev(randomUUID(), 'floor')]));
    await publishedLongAgo();
    // A newer release migrated the schema while this relay ran: its floor is above this relay's protocol.
    await db.pool.query(`UPDATE ${s}.settings SET value = $1 WHERE name = '${RELAY_FLOOR_SETTING}'`, [String(RELAY_PROTOCOL + 1)]);
    const warned: string[] = [];
    const logger: Logger = { ...silent, warn: (_obj: object, msg?: string) => void warned.push(String(msg)) };
    try {
      await assert.rejects(janitor(60_000, logger).prune(), (err: Error) => {
        assert.ok(isMigrationError(err), String(err));
        assert.match(err.message, new RegExp(`admits relay protocol ${RELAY_PROTOCOL + 1} or later.*prunes nothing; stop it`));
        return true;
      });
      assert.equal(warned.length, 1, 'the refusal is logged at warn');
      assert.deepEqual(await rowsOf('floor'), [1, 2], 'nothing pruned');
      // The statement itself checks the floor: one that slipped past the check deletes nothing either.
      const direct = await db.pool.query(prunePublishedSql(s), [60_000, 100, RELAY_PROTOCOL]);
      assert.equal(direct.rowCount, 0);
      assert.deepEqual(await rowsOf('floor'), [1, 2]);
    } finally {
      await db.pool.query(`UPDATE ${s}.settings SET value = $1 WHERE name = '${RELAY_FLOOR_SETTING}'`, [String(RELAY_PROTOCOL)]);
    }
    assert.equal(await janitor(60_000).prune(), 2, 'at the floor it prunes');
  });
});
