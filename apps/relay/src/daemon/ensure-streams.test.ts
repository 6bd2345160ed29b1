import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { StreamInfo } from '@nats-io/jetstream';
import { describePlan, planChanges, subjectCovers } from '../actions/streams.js';

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

test('streams plan - a raise of the window and the replicas reads as what it changes, and never as a removal', () => {
  const info = { config: { name: 'ORDERS', subjects: ['orders.>'], duplicate_window: 60e9, num_replicas: 1 } } as unknown as StreamInfo;
  const plan = {
    name: 'ORDERS',
    info,
    add: ['orders.late'],
    covered: [],
    windowMs: { from: 60_000, to: 1_800_000 },
    replicas: { from: 1, to: 3 },
  };
  assert.equal(
    describePlan(plan),
    'stream ORDERS exists: would add the subject(s) it lacks (orders.late); would raise its duplicate window from 1m to 30m; would raise its replicas from 1 to 3; none removed (subjects: orders.>, orders.late)',
  );
  assert.match(
    describePlan(plan, true),
    /^stream ORDERS exists: added the subject\(s\) it lacked \(orders\.late\); raised its duplicate window from 1m to 30m; raised its replicas from 1 to 3; none removed/,
  );
  assert.equal(planChanges({ ...plan, add: [], windowMs: undefined, replicas: undefined }), false);
});
