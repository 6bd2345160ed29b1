// Issue 13, small one: a relay whose start fails tears down once. The failed start
// used to tear down and the CLI's stop() then tore down again, logging pino's
// "Called end on pool more than once".
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { freePort } from '@ferry/testkit';
import { spawnRelay } from './relay-helpers.js';

test('relay - a failed start tears down once and exits with one reason', async () => {
  const closed = await freePort();
  const relay = spawnRelay([
    '--database-url',
    `postgres://postgres@127.0.0.1:${closed}/test`,
    '--nats-url',
    'nats://127.0.0.1:4222',
    '--http-port',
    '0',
    '--no-maintenance',
  ]);
  const exit = await relay.exited;
  const out = relay.output();
  assert.notEqual(exit.code, 0, out.slice(-2000));
  assert.match(out, /ECONNREFUSED|connect/i, 'the log says why the start failed');
  assert.doesNotMatch(out, /more than once/, out.slice(-2000));
  const teardowns = out.split('\n').filter((l) => /shutdown step failed/.test(l));
  assert.deepEqual(teardowns, [], 'no teardown step failed');
});
