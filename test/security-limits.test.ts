// Issue 32, items 1 and 2, as the attacker: a role that may only call the publish functions
// tries to store what the JS publisher refuses (data over 64 MiB, one key's versions out of
// order in one batch, a version that leaves no room), and a row far too large to hold, stored
// before the database refused it, meets the relay, `ferry doctor`, `ferry dlq show` and
// `ferry replay`: each stays up, and every other key is published.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { grantsSql, quoteIdentifier, SQLSTATE, sqlState, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { main } from '@ferry/relay';
import { createTestDatabase, createTestStream, natsUrl, type TestDatabase, type TestStream, uniqueName, waitFor } from '@ferry/testkit';
import pg from 'pg';
import { markPublished } from './delivery-state.js';
import { readStream, spawnRelay } from './relay-helpers.js';

const MAX_EVENT_BYTES = 64 * 1024 * 1024;

async function cli(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(['node', 'ferry', ...args], { out: (l) => out.push(l), err: (l) => err.push(l), env: {} });
  return { code, out: out.join('\n'), err: err.join('\n') };
}

/** The error a promise fails with (SQLSTATE, column, message), or undefined when it succeeds. */
async function refusal(p: Promise<unknown>): Promise<{ code?: string; column?: string; message: string } | undefined> {
  try {
    await p;
    return undefined;
  } catch (err) {
    return { code: sqlState(err), column: (err as { column?: string }).column, message: (err as Error).message };
  }
}

describe('the database enforces the publisher limits for any caller', () => {
  let db: TestDatabase;
  let role: string;
  let asPublisher: pg.Pool;
  let s: string;

  /** publish_events as the publishing role: one key's events with these versions, data of these sizes (built in SQL). */
  const batch = (keys: string[], versions: (number | string | null)[], sizes: number[] = keys.map(() => 2)) =>
    asPublisher.query(
      `SELECT * FROM ${s}.publish_events($1::uuid[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[],
         ARRAY(SELECT convert_to(repeat('x', n), 'UTF8') FROM unnest($8::int[]) WITH ORDINALITY AS t(n, i) ORDER BY i),
         $9::jsonb[], $10::timestamptz[], NULL, false)`,
      [
        keys.map(() => randomUUID()),
        keys,
        versions,
        keys.map(() => 'lim.orders'),
        keys.map(() => 'OrderPlaced'),
        keys.map(() => 'svc'),
        keys.map(() => 'application/octet-stream'),
        sizes,
        keys.map(() => '{}'),
        keys.map(() => new Date().toISOString()),
      ],
    );
  const single = (key: string, version: number | string | null, size = 2) =>
    asPublisher.query(
      `SELECT * FROM ${s}.publish_event($1, $2, $3, 'lim.orders', 'OrderPlaced', 'svc', 'application/octet-stream',
         convert_to(repeat('x', $4::int), 'UTF8'), '{}', now(), NULL, false)`,
      [randomUUID(), key, version, size],
    );
  const rowsOf = async (key: string) =>
    (await db.pool.query<{ version: string }>(`SELECT version::text FROM ${s}.outbox WHERE key = $1 ORDER BY seq`, [key])).rows.map(
      (r) => r.version,
    );

  before(async () => {
    db = await createTestDatabase({ prefix: 'sec_limits', lanes: 2 });
    s = quoteIdentifier(db.schema);
    await storeUncompressed(db, s);
    role = uniqueName('flim');
    await db.pool.query(`CREATE ROLE ${quoteIdentifier(role)} LOGIN`);
    await db.pool.query(grantsSql({ role, for: 'publisher', schema: db.schema }));
    const u = new URL(db.url);
    u.username = role;
    asPublisher = new pg.Pool({ connectionString: u.toString(), max: 2 });
  });

  after(async () => {
    await asPublisher?.end();
    await db.pool.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`);
    await db.pool.query(`DROP ROLE IF EXISTS ${quoteIdentifier(role)}`);
    await db.close();
  });

  test('security - versions [5, 4] of one key in one batch are refused (22023 naming events[1].version), nothing stored', async () => {
    const r = await refusal(batch(['k54', 'k54'], [5, 4]));
    assert.equal(r?.code, SQLSTATE.invalidParameterValue, r?.message);
    assert.equal(r?.column, 'events[1].version');
    assert.match(r?.message ?? '', /version 4 follows version 5 of key "k54"/);
    assert.deepEqual(await rowsOf('k54'), []);
    // Equal versions are not an increase either; increasing ones are stored in order.
    assert.equal((await refusal(batch(['k55', 'k55'], [5, 5])))?.column, 'events[1].version');
    await batch(['k56', 'k56'], [4, 5]);
    assert.deepEqual(await rowsOf('k56'), ['4', '5']);
  });

  test('security - one key with and without versions in one batch is refused; other keys of the batch may differ', async () => {
    const r = await refusal(batch(['kmix', 'kmix'], [3, null]));
    assert.equal(r?.code, SQLSTATE.invalidParameterValue, r?.message);
    assert.equal(r?.column, 'events[0].version');
    assert.deepEqual(await rowsOf('kmix'), []);
    await batch(['kgiven', 'kauto'], [7, null]);
    assert.deepEqual([await rowsOf('kgiven'), await rowsOf('kauto')], [['7'], ['1']]);
  });

  test('security - a version above 2^62 (also 2^63-1) or below 1 is refused; 2^62 is stored and the key still takes its next version', async () => {
    for (const bad of ['9223372036854775807', '4611686018427387905', '0', '-3']) {
      const r = await refusal(single('kmax', bad));
      assert.equal(r?.code, SQLSTATE.invalidParameterValue, `${bad}: ${r?.message}`);
      assert.equal(r?.column, 'version');
      assert.equal((await refusal(batch(['kmax'], [bad])))?.column, 'events[0].version', bad);
    }
    assert.deepEqual(await rowsOf('kmax'), []);
    await single('kmax', '4611686018427387904');
    await single('kmax', null); // before: "bigint out of range", at every publish of the key from then on
    assert.deepEqual(await rowsOf('kmax'), ['4611686018427387904', '4611686018427387905']);
  });

  test('security - data over 64 MiB is refused by both functions (the JS cap no longer stands alone); 64 MiB exactly is stored', async () => {
    const r = await refusal(single('kbig', null, MAX_EVENT_BYTES + 1));
    assert.equal(r?.code, SQLSTATE.invalidParameterValue, r?.message);
    assert.equal(r?.column, 'data');
    assert.match(r?.message ?? '', /67108865 bytes, over the outbox limit of 67108864/);
    const rb = await refusal(batch(['ksmall', 'kbig'], [null, null], [2, MAX_EVENT_BYTES + 1]));
    assert.equal(rb?.column, 'events[1].data', rb?.message);
    assert.deepEqual([await rowsOf('kbig'), await rowsOf('ksmall')], [[], []]);
    await single('kbig', null, MAX_EVENT_BYTES);
    assert.deepEqual(await rowsOf('kbig'), ['1']);
  });

  test('security - the JS publisher refuses versions above 2^62 with a ValidationError before any SQL', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    await assert.rejects(
      withTransaction(db.pool, (tx) =>
        publisher.publish(tx, { subject: 'lim.orders', key: 'kjs', type: 'T', data: {}, version: 2n ** 62n + 1n }),
      ),
      (err: Error) => err.name === 'ValidationError' && /at most 2\^62/.test(err.message),
    );
    assert.deepEqual(await rowsOf('kjs'), []);
  });
});

describe('a stored row too large to hold stops no relay and no command', () => {
  let db: TestDatabase;
  let stream: TestStream;
  let s: string;
  let hugeId: string;
  const HUGE_BYTES = 280 * 1024 * 1024;

  before(async () => {
    db = await createTestDatabase({ prefix: 'sec_huge', lanes: 4 });
    stream = await createTestStream({ prefix: 'sechuge' });
    s = quoteIdentifier(db.schema);
    await storeUncompressed(db, s);
    // Stored as the owner, bypassing the functions: a row from before outbox migration 000009.
    hugeId = randomUUID();
    await db.pool.query(
      `INSERT INTO ${s}.outbox (id, key, version, subject, type, source, content_type, data, headers, occurred_at)
       VALUES ($1, 'huge', 1, $2, 'Huge', 'sec', 'application/octet-stream', convert_to(repeat('x', $3::int), 'UTF8'), '{}', now())`,
      [hugeId, `${stream.prefix}.orders`, HUGE_BYTES],
    );
    await db.pool.query(`INSERT INTO ${s}.key_versions (key, version) VALUES ('huge', 1)`);
  });

  after(async () => {
    await stream.close();
    await db.close();
  });

  test('security - a 280 MB row goes dead unread; the relay stays up and publishes 20 events of other keys and none behind it', async (t) => {
    const publisher = createPublisher({ schema: db.schema, source: 'sec' });
    const ids = await withTransaction(db.pool, async (tx) => {
      const out: string[] = [];
      for (let i = 0; i < 20; i++) {
        out.push((await publisher.publish(tx, { subject: `${stream.prefix}.orders`, key: `k${i}`, type: 'T', data: { i } })).id);
      }
      await publisher.publish(tx, { subject: `${stream.prefix}.orders`, key: 'huge', type: 'T', data: { behind: true } });
      return out;
    });
    const relay = spawnRelay([
      '--database-url',
      db.url,
      '--schema',
      db.schema,
      '--nats-url',
      natsUrl(),
      '--no-maintenance',
      '--http-port',
      '0',
    ]);
    let peakKb = 0;
    try {
      await waitFor(
        async () => {
          peakKb = Math.max(peakKb, Number(/^VmHWM:\s+(\d+) kB/m.exec(await readStatus(relay.proc.pid))?.[1] ?? 0));
          const { rows } = await db.pool.query<{ dead: boolean }>(
            `SELECT dead_at IS NOT NULL AS dead FROM ${s}.outbox_events WHERE id = $1`,
            [hugeId],
          );
          return rows[0]?.dead === true;
        },
        { timeoutMs: 30_000, what: 'the huge row dead' },
      );
      const events = await readStream(stream.nc, stream.name);
      await waitFor(async () => (await readStream(stream.nc, stream.name)).length >= 20, {
        timeoutMs: 20_000,
        what: '20 events in the stream',
      });
      const stored = await readStream(stream.nc, stream.name);
      assert.deepEqual(
        new Set(stored.map((e) => e.id)),
        new Set(ids),
        `the stream holds exactly the 20 other keys' events (${events.length} earlier)`,
      );
      assert.equal(relay.proc.exitCode, null, `the relay is still running:\n${relay.output()}`);
      const { rows } = await db.pool.query<{ last_error: string; behind: string }>(
        `SELECT o.last_error, (SELECT count(*) FROM ${s}.outbox_events b WHERE b.key = 'huge' AND b.published_at IS NULL AND b.dead_at IS NULL)::text AS behind
           FROM ${s}.outbox_events o WHERE o.id = $1`,
        [hugeId],
      );
      assert.match(
        rows[0]?.last_error ?? '',
        /max_payload: the event's data is 293601280 bytes, over the NATS server's max_payload of \d+; the relay did not load it/,
      );
      assert.equal(rows[0]?.behind, '1', 'the row behind it waits (its key is blocked, in order)');
      t.diagnostic(`relay peak RSS ${Math.round(peakKb / 1024)} MB with a 280 MB row in its lanes`);
      assert.ok(peakKb > 0 && peakKb < 400 * 1024, `the relay never held the row: peak RSS ${Math.round(peakKb / 1024)} MB`);
    } finally {
      relay.proc.kill('SIGTERM');
      await relay.exited;
    }
  });

  test('security - ferry doctor, dlq show and replay meet the 280 MB row without loading it', async () => {
    const doctor = await cli([
      'doctor',
      '--database-url',
      db.url,
      '--schema',
      db.schema,
      '--nats-url',
      natsUrl(),
      '--stream',
      stream.name,
      '--json',
    ]);
    assert.match(doctor.out, /has 293601280 bytes of data, over the server's max_payload/, doctor.err);
    const shown = await cli(['dlq', 'show', hugeId, '--database-url', db.url, '--schema', db.schema, '--json']);
    assert.equal(shown.code, 0, shown.err);
    const row = JSON.parse(shown.out) as { dataBytes: number; dataTruncated: boolean; data: string };
    assert.deepEqual([row.dataBytes, row.dataTruncated], [HUGE_BYTES, true]);
    const carried = Buffer.from(row.data, 'base64').length;
    assert.ok(carried > 0 && carried <= 1024 * 1024, `dlq show carries at most 1 MiB of data, got ${carried} bytes`);
    // `ferry replay` selects published rows only: as if the row had gone out under a larger max_payload.
    assert.equal(await markPublished(db.pool, db.schema, 'o.id = $1', [hugeId]), 1);
    const replay = await cli([
      'replay',
      '--database-url',
      db.url,
      '--schema',
      db.schema,
      '--nats-url',
      natsUrl(),
      '--key',
      'huge',
      '--yes',
      '--json',
    ]);
    assert.equal(replay.code, 1, `replay reports the row it could not send: ${replay.err}`);
    assert.match(replay.out + replay.err, /293601280 bytes, over the NATS server's max_payload/);
  });
});

describe('rows of large headers stop no relay either', () => {
  let db: TestDatabase;
  let s: string;
  let role: string;
  const ROWS = 600;

  before(async () => {
    db = await createTestDatabase({ prefix: 'sec_headers', lanes: 4 });
    s = quoteIdentifier(db.schema);
    role = uniqueName('fhdr');
    await db.pool.query(`CREATE ROLE ${quoteIdentifier(role)} LOGIN`);
    await db.pool.query(grantsSql({ role, for: 'publisher', schema: db.schema }));
  });

  after(async () => {
    await db.pool.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`);
    await db.pool.query(`DROP ROLE IF EXISTS ${quoteIdentifier(role)}`);
    await db.close();
  });

  test('security - 600 rows of 1 byte of data and 1 MiB of headers each: a relay with a 256 MB heap stays up and settles them all', async (t) => {
    // Within every per-header rule (64 headers, values of 4,096 characters), each a four-byte character:
    // 1 MiB of headers a row, 12 KB on disk. The in-flight budget used to count data only, and 1,200
    // such rows took a relay past 1.4 GB, and one with a 256 MB heap (a container's limit) died of
    // "JavaScript heap out of memory" within 6 s of every start, having settled 64 of 600.
    const u = new URL(db.url);
    u.username = role;
    const asPublisher = new pg.Pool({ connectionString: u.toString(), max: 1 });
    try {
      await asPublisher.query(
        `SELECT count(*) FROM generate_series(1, $1::int) g,
           LATERAL ${s}.publish_event(gen_random_uuid(), 'hk' || g, NULL, 'hdr.orders', 'T', 'svc', 'application/json', '\\x7b7d',
             (SELECT jsonb_object_agg('h' || i, repeat(U&'\\+01F600', 4096)) FROM generate_series(1, 64) i), now(), NULL, false)`,
        [ROWS],
      );
    } finally {
      await asPublisher.end();
    }
    const relay = spawnRelay(
      ['--database-url', db.url, '--schema', db.schema, '--nats-url', natsUrl(), '--no-maintenance', '--http-port', '0'],
      { NODE_OPTIONS: '--max-old-space-size=256' },
    );
    let peakKb = 0;
    try {
      await waitFor(
        async () => {
          peakKb = Math.max(peakKb, Number(/^VmHWM:\s+(\d+) kB/m.exec(await readStatus(relay.proc.pid))?.[1] ?? 0));
          assert.equal(relay.proc.exitCode, null, `the relay died:\n${relay.output().slice(-2000)}`);
          const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${s}.outbox_events WHERE dead_at IS NULL`);
          return rows[0]?.n === 0;
        },
        { timeoutMs: 120_000, what: 'every header-heavy row dead (each is over max_payload)' },
      );
      peakKb = Math.max(peakKb, Number(/^VmHWM:\s+(\d+) kB/m.exec(await readStatus(relay.proc.pid))?.[1] ?? 0));
      t.diagnostic(`relay peak RSS ${Math.round(peakKb / 1024)} MB over ${ROWS} rows of 1 MiB of headers`);
      assert.equal(relay.proc.exitCode, null, `the relay is still running:\n${relay.output().slice(-2000)}`);
      const { rows } = await db.pool.query<{ reason: string; n: number }>(
        `SELECT split_part(last_error, ':', 1) AS reason, count(*)::int AS n FROM ${s}.outbox_events GROUP BY 1`,
      );
      assert.deepEqual(rows, [{ reason: 'max_payload', n: ROWS }], 'each is over max_payload, and dead for that reason');
    } finally {
      relay.proc.kill('SIGTERM');
      await relay.exited;
    }
  });
});

/** Data of this test's outbox stored as it is: compressing tens of MB of one repeated byte took most of the test's time. */
async function storeUncompressed(db: TestDatabase, s: string): Promise<void> {
  await db.pool.query(`ALTER TABLE ${s}.outbox ALTER COLUMN data SET STORAGE EXTERNAL`);
}

async function readStatus(pid: number | undefined): Promise<string> {
  const { readFile } = await import('node:fs/promises');
  return pid === undefined ? '' : readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
}
