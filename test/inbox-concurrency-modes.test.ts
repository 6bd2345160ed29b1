import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { assertFinalState, assertNoDoubleApply, closeRaces, race, SMALL } from './inbox-race.js';

after(closeRaces);

describe('inbox under concurrency, other modes', () => {
  test('inbox - latest: two instances apply each (key, version) at most once, only ever newer, and end at the last version', async () => {
    const r = await race('latest', SMALL);
    const applied = await assertNoDoubleApply(r);
    assert.ok(applied <= r.events && applied >= r.keys, `applied ${applied}`);
    const { rows: backwards } = await r.f.db.pool.query(
      `SELECT key FROM (SELECT key, version, lag(version) OVER (PARTITION BY key ORDER BY seq) AS prev FROM ${r.f.s}.effect_log) x WHERE version <= prev LIMIT 5`,
    );
    assert.deepEqual(backwards, [], 'per key, each applied version is newer than the one before');
    await assertFinalState(r);
  });

  test('inbox - dedupe: two instances apply each event id exactly once through duplicates and a full replay', async () => {
    const r = await race('dedupe', SMALL);
    assert.equal(await assertNoDoubleApply(r), r.events);
    const { rows } = await r.f.db.pool.query(`SELECT count(*)::int AS n FROM ${r.f.s}.inbox_messages WHERE consumer = 'billing'`);
    assert.equal(rows[0]?.n, r.events);
  });
});
