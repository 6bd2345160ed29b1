import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { KeyScheduler } from './key-scheduler.js';

test('key scheduler - one key runs serially in push order, keys run concurrently up to the limit', async () => {
  const errors: unknown[] = [];
  const scheduler = new KeyScheduler(3, (e) => errors.push(e));
  const order: Record<string, number[]> = {};
  let running = 0;
  let peak = 0;
  const perKeyRunning = new Map<string, number>();
  for (let i = 0; i < 40; i++) {
    const key = `k${i % 5}`;
    scheduler.push(key, async () => {
      running++;
      peak = Math.max(peak, running);
      perKeyRunning.set(key, (perKeyRunning.get(key) ?? 0) + 1);
      assert.equal(perKeyRunning.get(key), 1, `two tasks of ${key} at once`);
      await sleep(Math.random() * 5);
      order[key] = [...(order[key] ?? []), i];
      perKeyRunning.set(key, (perKeyRunning.get(key) ?? 0) - 1);
      running--;
    });
  }
  assert.equal(scheduler.size, 40);
  await scheduler.idle();
  assert.equal(scheduler.size, 0);
  assert.equal(peak, 3);
  assert.deepEqual(errors, []);
  for (const [key, seen] of Object.entries(order)) {
    assert.deepEqual(
      seen,
      [...seen].sort((a, b) => a - b),
      `${key} in push order`,
    );
    assert.equal(seen.length, 8);
  }
});

test('key scheduler - a task that throws is reported and does not stall its key', async () => {
  const errors: unknown[] = [];
  const scheduler = new KeyScheduler(2, (e) => errors.push(e));
  const done: string[] = [];
  scheduler.push('a', async () => {
    throw new Error('boom');
  });
  scheduler.push('a', async () => {
    done.push('a2');
  });
  await scheduler.idle();
  assert.deepEqual(done, ['a2']);
  assert.equal(errors.length, 1);
});
