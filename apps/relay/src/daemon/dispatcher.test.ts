import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ClaimedRow } from '../sql/claim-batch.js';
import { claimFoundBacklog } from './dispatcher.js';

/** A claim's rows: `counts[i]` rows of key `k<i>` (only the key matters here). */
function rows(...counts: number[]): ClaimedRow[] {
  return counts.flatMap((n, i) => Array.from({ length: n }, () => ({ key: `k${i}` }) as ClaimedRow));
}

test('claimFoundBacklog - nothing found is no backlog', () => {
  assert.equal(claimFoundBacklog([], 500, 5000), false);
});

test('claimFoundBacklog - keys claimed to their end, fewer than the limit, are no backlog', () => {
  assert.equal(claimFoundBacklog(rows(5, 3, 1), 500, 5000), false);
});

test('claimFoundBacklog - the key limit reached is a backlog', () => {
  assert.equal(claimFoundBacklog(rows(...Array(500).fill(1)), 500, 5000), true);
});

test('claimFoundBacklog - a key that got its whole share is a backlog, even when the shares leave room unused', () => {
  // 300 keys with 20 rows each in a room of 5,000: each key gets 16, 4,800 rows in all.
  assert.equal(claimFoundBacklog(rows(...Array(300).fill(16)), 500, 5000), true);
  assert.equal(claimFoundBacklog(rows(...Array(299).fill(15), 16), 500, 5000), true);
  assert.equal(claimFoundBacklog(rows(...Array(300).fill(15)), 500, 5000), false);
});

test('claimFoundBacklog - a room smaller than the keys found gives each key one row: any key may have more', () => {
  assert.equal(claimFoundBacklog(rows(1, 1, 1), 500, 2), true);
});
