import assert from 'node:assert/strict';
import { test } from 'node:test';
import { count } from './count.js';

test('count - one is singular, everything else plural, irregular plurals passed in', () => {
  assert.equal(count(1, 'relay instance'), '1 relay instance');
  assert.equal(count(0, 'problem'), '0 problems');
  assert.equal(count(2, 'event'), '2 events');
  assert.equal(count('1', 'lane'), '1 lane');
  assert.equal(count(1n, 'key'), '1 key');
  assert.equal(count(3, 'dead event blocks its key', 'dead events block their keys'), '3 dead events block their keys');
});
