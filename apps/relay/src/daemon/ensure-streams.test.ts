import assert from 'node:assert/strict';
import { test } from 'node:test';
import { subjectCovers } from '../actions/streams.js';

test('ensure-streams - a subject is covered by a filter that matches every subject it can be, NATS wildcards included', () => {
  const cases: Array<[string, string, boolean]> = [
    ['orders.>', 'orders.created', true],
    ['orders.>', 'orders.a.b', true],
    ['orders.>', 'orders.>', true],
    ['orders.>', 'orders.*', true],
    ['orders.>', 'orders', false],
    ['orders.*', 'orders.created', true],
    ['orders.*', 'orders.*', true],
    ['orders.*', 'orders.>', false],
    ['orders.*', 'orders.a.b', false],
    ['orders.created', 'orders.created', true],
    ['orders.created', 'orders.*', false],
    ['orders.created', 'orders.paid', false],
    ['>', 'anything.at.all', true],
    ['payments.>', 'orders.created', false],
  ];
  for (const [pattern, subject, covers] of cases) assert.equal(subjectCovers(pattern, subject), covers, `${pattern} covers ${subject}`);
});
