import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, test } from 'node:test';
import { quoteIdentifier } from '@ferry/core';
import { createTestDatabase, type TestDatabase } from '@ferry/testkit';
import { setFailed } from './delivery-state.js';
import { ferry } from './ops-helpers.js';
import { publishEvents } from './relay-helpers.js';

let db: TestDatabase;
let ids: string[] = [];
const s = () => quoteIdentifier(db.schema);
const base = () => ['--database-url', db.url, '--schema', db.schema];

before(async () => {
  db = await createTestDatabase({ prefix: 'ops_dlq', lanes: 2 });
  // 12 events over keys k0..k3; the first event of each key is dead, so 2 later ones wait behind each.
  ids = await publishEvents(db.pool, db.schema, 'opsdlq', 12, { keys: 4 });
  const n = await setFailed(db.pool, db.schema, 'o.id = ANY ($1::uuid[])', [ids.slice(0, 4)], {
    attempts: 25,
    lastError: 'no_responders: no stream',
    dead: true,
  });
  assert.equal(n, 4);
});
after(async () => {
  await db.close();
});

const dead = async () =>
  (
    await db.pool.query<{ key: string }>(
      `SELECT key FROM ${s()}.outbox_events WHERE dead_at IS NOT NULL AND published_at IS NULL ORDER BY key`,
    )
  ).rows.map((r) => r.key);

test('ferry dlq - show prints one dead event in full with its payload and the events waiting behind it', async () => {
  const r = await ferry(['dlq', 'show', ids[0] as string, ...base(), '--json']);
  assert.equal(r.code, 0, r.err);
  const shown = r.json<Record<string, unknown>>();
  assert.equal(shown.id, ids[0]);
  assert.equal(shown.key, 'k0');
  assert.equal(shown.state, 'dead');
  assert.equal(shown.lastError, 'no_responders: no stream');
  assert.equal(shown.blockedBehind, 2);
  assert.equal(shown.dataEncoding, 'utf8');
  assert.deepEqual(JSON.parse(shown.data as string), { n: 0 });
  const human = await ferry(['dlq', 'show', ids[0] as string, ...base()]);
  assert.match(human.out, /^state {9}dead$/m);
  assert.match(human.out, /^blockedBehind 2$/m);
  assert.match(human.out, /data \(utf8, \d+ bytes\):\n\{"n":0\}/);
  const missing = await ferry(['dlq', 'show', '00000000-0000-4000-8000-000000000000', ...base()]);
  assert.equal(missing.code, 1);
  assert.match(missing.err, /no outbox event/);
  assert.equal((await ferry(['dlq', 'show', 'nope', ...base()])).code, 2);
});

test('ferry dlq - --key and --all-dead need --yes without a terminal, and change nothing without it', async () => {
  for (const args of [
    ['retry', '--key', 'k1'],
    ['discard', '--all-dead'],
  ]) {
    const r = await ferry(['dlq', ...args, ...base()]);
    assert.equal(r.code, 2, r.err);
    assert.match(r.err, /pass --yes to confirm/);
  }
  assert.deepEqual(await dead(), ['k0', 'k1', 'k2', 'k3']);
  const both = await ferry(['dlq', 'retry', ids[0] as string, '--all-dead', '--yes', ...base()]);
  assert.equal(both.code, 2);
  assert.match(both.err, /not several/);
});

test('ferry dlq - retry and discard of event ids also need --yes without a terminal; --dry-run lists and changes nothing', async () => {
  for (const action of ['retry', 'discard']) {
    const r = await ferry(['dlq', action, ids[0] as string, ...base()]);
    assert.equal(r.code, 2, `${action} ID without --yes: ${r.err}`);
    assert.match(r.err, /pass --yes to confirm/);
  }
  assert.deepEqual(await dead(), ['k0', 'k1', 'k2', 'k3']);
  const dry = await ferry(['dlq', 'discard', ids[0] as string, ids[1] as string, '--dry-run', '--json', ...base()]);
  assert.equal(dry.code, 0, dry.err);
  const { selection, ...listed } = dry.json<{ selection: { rows: number; digest: string } }>();
  assert.deepEqual(listed, { discarded: [], notFailed: [], notDead: [], dryRun: true, wouldChange: [ids[0], ids[1]] });
  // The digest a confirmation is held to (--yes --expect-selection): sha256 over the ids in seq order, one per line.
  assert.deepEqual(selection, { rows: 2, digest: createHash('sha256').update(`${ids[0]}\n${ids[1]}\n`).digest('hex') });
  const bulk = await ferry(['dlq', 'retry', '--all-dead', '--dry-run', '--no-check-streams', ...base()]);
  assert.equal(bulk.code, 0, bulk.err);
  assert.equal(bulk.out.split('\n').filter((l) => l.startsWith('would retry ')).length, 4);
  assert.deepEqual(await dead(), ['k0', 'k1', 'k2', 'k3'], 'nothing changed');
  const help = await ferry(['dlq', 'retry', '--help']);
  assert.match(help.out, /--dry-run/);
});

test('ferry dlq - retry --key K --yes retries only that key; discard --all-dead --yes the rest', async () => {
  const r = await ferry(['dlq', 'retry', '--key', 'k1', '--yes', '--json', ...base()]);
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(r.json(), { retried: [ids[1]], notFailed: [], notDead: [], dryRun: false });
  assert.deepEqual(await dead(), ['k0', 'k2', 'k3']);
  const { rows } = await db.pool.query<{ attempts: number; due: boolean }>(
    `SELECT attempts, next_attempt_at <= now() AS due FROM ${s()}.outbox_events WHERE id = $1`,
    [ids[1]],
  );
  assert.deepEqual(rows[0], { attempts: 0, due: true });
  const all = await ferry(['dlq', 'discard', '--all-dead', '--yes', ...base()]);
  assert.equal(all.code, 0, all.err);
  assert.equal(all.out.split('\n').filter((l) => l.startsWith('discarded ')).length, 3);
  assert.deepEqual(await dead(), []);
  const none = await ferry(['dlq', 'retry', '--all-dead', '--yes', ...base()]);
  assert.equal(none.code, 0);
  assert.equal(none.out, 'no dead events of every key');
  const shown = (await ferry(['dlq', 'show', ids[0] as string, ...base(), '--json'])).json<Record<string, unknown>>();
  assert.equal(shown.state, 'discarded');
  assert.match(String(shown.lastError), /^discarded by ferry dlq discard/);
});

/** The audit trail's `changed`: the ids, their count, and sha256 over them in order, one per line. */
function changed(list: string[]) {
  return {
    rows: list.length,
    digest: createHash('sha256')
      .update(list.map((id) => `${id}\n`).join(''))
      .digest('hex'),
    ids: list,
  };
}

test('ferry dlq - every retry and discard is recorded in operator_actions: who, via the CLI, what filter, how many rows', async () => {
  const { rows } = await db.pool.query<{
    actor: string;
    via: string;
    action: string;
    filter: Record<string, unknown>;
    rows: number;
    outcome: string;
  }>(`SELECT actor, via, action, filter, rows, outcome FROM ${s()}.operator_actions ORDER BY id`);
  // The earlier tests: retry --key k1 (1 row), discard --all-dead (3 rows); retry --all-dead found nothing and changed nothing.
  assert.deepEqual(
    rows.map((r) => [r.via, r.action, r.filter, r.rows, r.outcome]),
    [
      // Each names the rows it changed, in seq order, with their count and digest (issue 42).
      ['cli', 'dlq.retry', { key: 'k1', state: 'failed', changed: changed([ids[1] as string]) }, 1, 'ok'],
      ['cli', 'dlq.discard', { state: 'dead', changed: changed([ids[0], ids[2], ids[3]] as string[]) }, 3, 'ok'],
    ],
  );
  assert.match(rows[0]?.actor ?? '', /.@./, 'user@host');
});
