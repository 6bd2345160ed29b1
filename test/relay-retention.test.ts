import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { isConfigError, isValidationError, quoteIdentifier } from '@ferry/core';
import { createRelay } from '@ferry/relay';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream } from '@ferry/testkit';
import { markPublished } from './delivery-state.js';
import { ferry } from './ops-helpers.js';
import { publishEvents } from './relay-helpers.js';

// One retention per outbox (issue 14 item 11): the prune job used whichever instance's
// --retention picked it up, so a relay started with 0ms deleted every published row.

let db: TestDatabase;
let stream: TestStream;
let s: string;

before(async () => {
  db = await createTestDatabase({ prefix: 'relay_retention', lanes: 2 });
  stream = await createTestStream({ prefix: 'relayret' });
  s = quoteIdentifier(db.schema);
  await publishEvents(db.pool, db.schema, stream.prefix, 20, { keys: 4 });
  assert.equal(await markPublished(db.pool, db.schema, 'true', [], `now() - interval '1 hour'`), 20);
});
after(async () => {
  await stream.close();
  await db.pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(`${db.schema}_boss`)} CASCADE`);
  await db.close();
});

const stored = async () =>
  (await db.pool.query<{ value: string }>(`SELECT value FROM ${s}.settings WHERE name = 'retention_ms'`)).rows[0]?.value;
const count = async () => Number((await db.pool.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${s}.outbox`)).rows[0]?.n);
const migrateArgs = () => ['migrate', '--database-url', db.url, '--schema', db.schema];

test('relay retention - the outbox stores one retention, 7 days unless set', async () => {
  assert.equal(await stored(), String(7 * 86_400_000));
});

test('relay retention - a relay given another retention than the outbox refuses to start and prunes nothing', async () => {
  const relay = createRelay({
    databaseUrl: db.url,
    schema: db.schema,
    nats: { servers: stream.nc.getServer() },
    retentionMs: 1,
    pruneCron: '* * * * *',
    cronMonitorIntervalSeconds: 1,
  });
  try {
    await assert.rejects(
      relay.start(),
      (err: unknown) => isConfigError(err) && /ferry migrate --schema .* --retention 1ms/.test(err.message),
    );
  } finally {
    await relay.stop().catch(() => {}); // a relay that did start (the old behaviour) must not keep the test alive
  }
  assert.equal(await count(), 20);
  assert.throws(
    () => createRelay({ databaseUrl: db.url, schema: db.schema, retentionMs: 0 }),
    (err: unknown) => isValidationError(err) && err.field === 'retentionMs',
  );
});

test('relay retention - ferry migrate --retention refuses 0, asks (or needs --yes) under 1 h, and stores it for every relay', async () => {
  const run = await ferry([...migrateArgs(), '--retention', '30m']);
  assert.equal(run.code, 2, 'under 1 h without a terminal needs --yes');
  assert.match(run.err, /--yes/);
  assert.equal(await stored(), String(7 * 86_400_000));
  const zero = await ferry([...migrateArgs(), '--retention', '0ms', '--yes']);
  assert.equal(zero.code, 2, 'zero is refused even with --yes');
  assert.match(zero.err, /every published row/);
  assert.equal(await stored(), String(7 * 86_400_000));
  const dry = await ferry([...migrateArgs(), '--retention', '30m', '--dry-run', '--json']);
  assert.equal(dry.code, 0, dry.err);
  assert.deepEqual(dry.json<{ wouldApply: unknown[]; wouldPrune: number }>().wouldPrune, 20, 'the 20 rows published an hour ago');
  assert.deepEqual(dry.json<{ wouldApply: unknown[] }>().wouldApply, []);
  assert.equal(await stored(), String(7 * 86_400_000), '--dry-run changes nothing');
  const set = await ferry([...migrateArgs(), '--retention', '30m', '--yes']);
  assert.equal(set.code, 0, set.err);
  assert.equal(await stored(), String(30 * 60_000));
  // A relay given the stored retention starts.
  const relay = createRelay({
    databaseUrl: db.url,
    schema: db.schema,
    nats: { servers: stream.nc.getServer() },
    retentionMs: 30 * 60_000,
    maintenance: false,
  });
  await relay.start();
  await relay.stop();
  const help = await ferry(['migrate', '--help']);
  assert.match(help.out, /--retention <duration>/);
});
