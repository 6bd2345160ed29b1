import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { assertFinalState, assertNoDoubleApply, closeRaces, FULL, race } from './inbox-race.js';

after(closeRaces);

describe('inbox under concurrency', () => {
  test('inbox - sequential: two instances on one durable consumer apply each (key, version) exactly once, in order, through duplicates and a full replay', async () => {
    const r = await race('sequential', FULL);
    assert.equal(await assertNoDoubleApply(r), r.events, 'applied exactly once per event');
    const { rows: disorder } = await r.f.db.pool.query(
      `SELECT key FROM (SELECT key, version, row_number() OVER (PARTITION BY key ORDER BY seq) AS n FROM ${r.f.s}.effect_log) x WHERE version <> n LIMIT 5`,
    );
    assert.deepEqual(disorder, [], 'every key applied as 1, 2, 3, … in commit order');
    await assertFinalState(r);
    const { rows: parked } = await r.f.db.pool.query(`SELECT count(*)::int AS n FROM ${r.f.s}.inbox_versions WHERE parked > 0`);
    assert.equal(parked[0]?.n, 0);
  });
});
