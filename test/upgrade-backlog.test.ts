// An upgrade in the middle of a backlog (issue 30: data-model changes must keep pending rows in
// order): an outbox migrated and filled by the earlier release (scripts/build-old-release.sh), its
// relay killed mid-drain with dead rows on record, then this release's migrate (000013, 000014,
// 000015: the relay floor, the failed-rows index, and the delivery state moved off the event rows
// into outbox_pending and outbox_published) and relay drain the rest.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { migrationStatus, quoteIdentifier, relayBossSchemaFor } from '@ferry/core';
import { createTestStream, databaseUrl, type TestStream, uniqueName, waitFor } from '@ferry/testkit';
import pg from 'pg';
import { oldReleaseDir, testRelayArgs } from './old-release.js';
import { ferry } from './ops-helpers.js';
import { assertExactlyOnceInKeyOrder, type RelayProcess, readStream, spawnRelay } from './relay-helpers.js';

interface OldPublisher {
  publishMany(
    tx: pg.PoolClient,
    events: Array<{ subject: string; key: string; type: string; data: unknown }>,
  ): Promise<Array<{ id: string }>>;
}

const KEYS = 40;
const EVENTS = 4000;
const DEAD_KEYS = 3;

describe('upgrade mid-backlog: an outbox filled and partly drained by the earlier release', () => {
  let dir: string;
  let stream: TestStream;
  let admin: pg.Pool;
  const schema = uniqueName('upgrade_backlog');
  const s = quoteIdentifier(schema);
  const procs: RelayProcess[] = [];

  before(async () => {
    dir = oldReleaseDir();
    stream = await createTestStream({ prefix: 'upgradebacklog' });
    admin = new pg.Pool({ connectionString: databaseUrl(), max: 4 });
  });

  after(async () => {
    for (const p of procs) if (p.proc.exitCode === null && p.proc.signalCode === null) p.proc.kill('SIGKILL');
    await Promise.all(procs.map((p) => p.exited));
    await admin?.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`);
    await admin?.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(relayBossSchemaFor(schema))} CASCADE`);
    await admin?.end();
    await stream?.close();
  });

  const relayArgs = (extra: string[]) => testRelayArgs(schema, 2000, extra);

  // The earlier release's rows carry their delivery state; this release's view shows it in the same columns.
  let rowsWithState = 'outbox';

  async function counts(): Promise<{ published: number; dead: number; pending: number }> {
    const { rows } = await admin.query<{ published: number; dead: number; pending: number }>(
      `SELECT count(*) FILTER (WHERE published_at IS NOT NULL)::int AS published,
              count(*) FILTER (WHERE dead_at IS NOT NULL)::int AS dead,
              count(*) FILTER (WHERE published_at IS NULL AND dead_at IS NULL)::int AS pending
         FROM ${s}.${rowsWithState}`,
    );
    return rows[0] as { published: number; dead: number; pending: number };
  }

  /** Every row's delivery state, in seq order, as one text per row (a published row's next attempt means nothing, and 000015 does not keep it). */
  async function deliveryStates(): Promise<string[]> {
    const { rows } = await admin.query<{ r: string }>(
      `SELECT format('%s|%s|%s|%s|%s|%s|%s|%s', seq, key, version, published_at, attempts,
                     CASE WHEN published_at IS NULL THEN next_attempt_at END, last_error, dead_at) AS r
         FROM ${s}.${rowsWithState} ORDER BY seq`,
    );
    return rows.map((x) => x.r);
  }

  test('upgrade - the earlier release migrates, publishes and half drains; this release migrates and drains the rest, every key in order, the dead rows kept', async () => {
    const oldBin = join(dir, 'apps/relay/bin/ferry.js');
    // 1. The earlier release's schema (version 12) and its publisher's rows.
    await promisify(execFile)(process.execPath, [oldBin, 'migrate', '--database-url', databaseUrl(), '--schema', schema, '--lanes', '4']);
    assert.equal((await migrationStatus(admin, { schema, set: 'outbox' })).current, 12, 'the earlier release stops at 000012');
    const { createPublisher } = (await import(pathToFileURL(join(dir, 'packages/publisher/dist/index.js')).href)) as {
      createPublisher(o: { schema: string; source: string }): OldPublisher;
    };
    const publisher = createPublisher({ schema, source: 'upgrade-test' });
    const ids: string[] = [];
    const client = await admin.connect();
    try {
      for (let start = 0; start < EVENTS; start += 500) {
        await client.query('BEGIN');
        const events = Array.from({ length: 500 }, (_, i) => ({
          subject: `${stream.prefix}.orders`,
          key: `order-${(start + i) % KEYS}`,
          type: 'OrderPlaced',
          data: { n: start + i },
        }));
        // Keys of their own on a subject no stream binds: dead after one attempt, under the earlier release.
        if (start === 0) {
          for (let k = 0; k < DEAD_KEYS; k++)
            events.push({ subject: 'upgradebacklog-unbound.x', key: `dead-${k}`, type: 'Lost', data: { n: k } });
        }
        const published = await publisher.publishMany(client, events);
        await client.query('COMMIT');
        ids.push(...published.slice(0, 500).map((p) => p.id));
      }
    } finally {
      client.release();
    }

    // 2. The earlier relay, one row at a time so the backlog lasts, killed once it sent part of it
    //    and the dead rows are on record (its acknowledged rows not all marked: sent again later).
    const old = spawnRelay(relayArgs(['--batch-size', '1', '--max-in-flight', '1', '--max-attempts', '1']), {}, oldBin);
    procs.push(old);
    await waitFor(
      async () => {
        const c = await counts();
        return c.published >= 300 && c.dead === DEAD_KEYS;
      },
      { timeoutMs: 60_000, what: `the earlier relay to send 300 events and fail ${DEAD_KEYS}` },
    ).catch((err: Error) => assert.fail(`${err.message}\n${old.output().slice(-2000)}`));
    old.proc.kill('SIGKILL');
    await old.exited;
    const mid = await counts();
    assert.ok(mid.pending > EVENTS / 2, `the upgrade starts mid-backlog (${mid.pending} of ${EVENTS} rows pending)`);
    const before = await deliveryStates();

    // 3. This release's migrate, on the rows the earlier one wrote.
    const upgraded = await ferry(['migrate', '--database-url', databaseUrl(), '--schema', schema]);
    assert.equal(upgraded.code, 0, upgraded.err);
    const status = await migrationStatus(admin, { schema, set: 'outbox' });
    assert.equal(status.current, status.latest, 'migrated to this release');
    // Every row kept its delivery state (published when, attempts, next attempt, reason, dead), each
    // pending one now a row of outbox_pending with its seq, so the keys' order is as it was.
    rowsWithState = 'outbox_events';
    assert.deepEqual(await deliveryStates(), before, 'each row has the delivery state the earlier release left it');
    assert.deepEqual(await counts(), mid);
    const { rows: moved } = await admin.query<{ pending: number; published: number; columns: string[] }>(
      `SELECT (SELECT count(*)::int FROM ${s}.outbox_pending) AS pending, (SELECT count(*)::int FROM ${s}.outbox_published) AS published,
              (SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_attribute a
                WHERE a.attrelid = '${s}.outbox'::regclass AND a.attnum > 0 AND NOT a.attisdropped
                  AND a.attname IN ('published_at', 'attempts', 'next_attempt_at', 'last_error', 'dead_at')) AS columns`,
    );
    assert.deepEqual(moved, [{ pending: mid.pending + mid.dead, published: mid.published, columns: null }]);
    const { rows: idx } = await admin.query<{ relname: string; valid: boolean }>(
      `SELECT c.relname, i.indisvalid AS valid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE c.relname IN ('outbox_pending_walk_idx', 'outbox_pending_failed_idx') AND c.relnamespace = $1::regnamespace ORDER BY 1`,
      [schema],
    );
    assert.deepEqual(
      idx,
      [
        { relname: 'outbox_pending_failed_idx', valid: true },
        { relname: 'outbox_pending_walk_idx', valid: true },
      ],
      "the pending rows' indexes were built over the old rows",
    );

    // 4. This release's relay drains the rest.
    const relay = spawnRelay(relayArgs([]));
    procs.push(relay);
    await waitFor(async () => (await counts()).pending === 0, { timeoutMs: 120_000, what: 'this release to drain the rest' }).catch(
      (err: Error) => assert.fail(`${err.message}\n${relay.output().slice(-2000)}`),
    );
    assertExactlyOnceInKeyOrder(await readStream(stream.nc, stream.name), ids);
    const end = await counts();
    assert.deepEqual(end, { published: EVENTS, dead: DEAD_KEYS, pending: 0 });

    // 5. The dead rows the earlier release recorded are this release's dlq.
    const dlq = await ferry(['dlq', 'list', '--database-url', databaseUrl(), '--schema', schema, '--json']);
    assert.equal(dlq.code, 0, dlq.err);
    const dead = dlq.json<Array<{ key: string; attempts: number }>>().map((e) => `${e.key}:${e.attempts}`);
    assert.deepEqual(dead.sort(), ['dead-0:1', 'dead-1:1', 'dead-2:1']);
  });
});
