import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { faultSchedule, parseChaosArgs, UsageError } from './plan.js';

describe('chaos plan', () => {
  test('chaos - a seed gives the same fault schedule every time, inside the load', () => {
    const a = faultSchedule({ events: 3000, kills: 6, seed: 1 });
    assert.deepEqual(faultSchedule({ events: 3000, kills: 6, seed: 1 }), a);
    assert.notDeepEqual(faultSchedule({ events: 3000, kills: 6, seed: 2 }), a);
    assert.equal(a.filter((f) => f.kind === 'kill').length, 6);
    assert.equal(a.filter((f) => f.kind === 'nats-restart').length, 1);
    assert.equal(a.filter((f) => f.kind === 'pg-terminate').length, 3);
    assert.equal(a.filter((f) => f.kind === 'pause').length, 3);
    assert.deepEqual(
      a
        .filter((f) => f.kind === 'partition')
        .map((f) => (f.kind === 'partition' ? f.from : ''))
        .sort(),
      ['nats', 'pg'],
    );
    for (const f of a) assert.ok(f.atEvent >= 150 && f.atEvent < 2850, `fault at ${f.atEvent} inside 5-95 % of the load`);
    assert.deepEqual(
      a.map((f) => f.atEvent),
      [...a.map((f) => f.atEvent)].sort((x, y) => x - y),
      'sorted by when they fire',
    );
  });

  test('chaos - the command line needs --events and --kills, and rejects what it does not know', () => {
    assert.deepEqual(parseChaosArgs(['--events', '3000', '--kills', '6', '--seed', '1']), {
      events: 3000,
      kills: 6,
      seed: 1,
      writers: 4,
      keys: 500,
      ratePerSecond: 200,
      drainTimeoutMs: 300_000,
    });
    assert.equal(parseChaosArgs(['--events=100000', '--kills=20']).ratePerSecond, 1667);
    assert.throws(() => parseChaosArgs(['--events', '10']), UsageError);
    assert.throws(() => parseChaosArgs(['--events', '10', '--kills', 'many']), /--kills needs an integer/);
    assert.throws(() => parseChaosArgs(['--events', '10', '--kills', '1', '--bogus', '1']), /unknown option --bogus/);
  });
});
