// The defaults a new user meets without setting anything (issue 16): where warnings go, where pg-boss lives.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { bossSchemaFor, grantsSql } from '@ferry/core';
import { compileInboxOptions, SILENT_LOGGER } from './options.js';
import type { InboxOptions } from './types.js';
import { createWarnLogger, WARN_LOGGER } from './warn-logger.js';

const base = {
  pool: { query: async () => ({ rows: [] }), connect: async () => ({ query: async () => ({ rows: [] }), release() {} }) },
  nc: { request: async () => ({}) },
  stream: 'ORDERS',
  consumer: 'billing',
  handlers: {},
} as unknown as InboxOptions;

test('inbox logger - by default warnings and errors reach stderr, one line each; debug and info do not', () => {
  const lines: string[] = [];
  const log = createWarnLogger((l) => lines.push(l));
  log.debug({ a: 1 }, 'debug line');
  log.info({ a: 1 }, 'info line');
  log.warn({ err: new Error('card declined'), id: 'e-1', key: 'order 1', attempt: 2 }, 'inbox handler failed');
  log.error({ err: new Error('db down\nsecond line'), consumer: 'billing' }, 'inbox stopped consuming');
  assert.deepEqual(lines, [
    'ferry inbox warn: inbox handler failed err="card declined" id=e-1 key="order 1" attempt=2\n',
    'ferry inbox error: inbox stopped consuming err="db down\\nsecond line" consumer=billing\n',
  ]);
  assert.equal(compileInboxOptions(base).logger, WARN_LOGGER, 'the default');
  assert.equal(compileInboxOptions({ ...base, logger: SILENT_LOGGER }).logger, SILENT_LOGGER, 'muted on request');
});

test('inbox logger - a throwing onEvent hook is visible by default (one error line), and never breaks the inbox', (t) => {
  const written: string[] = [];
  t.mock.method(process.stderr, 'write', (chunk: string) => {
    written.push(String(chunk));
    return true;
  });
  const o = compileInboxOptions({
    ...base,
    onEvent: () => {
      throw new Error('hook bug');
    },
  });
  o.onEvent({ kind: 'duplicate', consumer: 'billing', id: 'e-1', key: 'k', version: 1n, type: 'OrderPlaced' } as never);
  t.mock.restoreAll();
  assert.equal(written.length, 1, written.join(''));
  assert.match(written[0] ?? '', /^ferry inbox error: .*onEvent.*hook bug/);
});

test('inbox options - the inbox pg-boss schema is <schema>_boss unless given, and the relay keeps its own apart', () => {
  assert.equal(compileInboxOptions(base).bossSchema, 'ferry_boss');
  assert.equal(compileInboxOptions({ ...base, schema: 'billing' }).bossSchema, 'billing_boss');
  assert.equal(compileInboxOptions({ ...base, schema: 'billing', bossSchema: 'pgboss' }).bossSchema, 'pgboss');
  assert.equal(bossSchemaFor('billing'), 'billing_boss');
  assert.equal(bossSchemaFor('x'.repeat(63)).length, 63, 'still an identifier');
  // The grants a DBA prints name the same schema the inbox will use.
  assert.match(
    grantsSql({ role: 'ferry_inbox', for: 'inbox', schema: 'billing' }),
    /GRANT USAGE ON SCHEMA "billing_boss" TO "ferry_inbox";/,
  );
  assert.match(
    grantsSql({ role: 'ferry_relay', for: 'relay', schema: 'billing' }),
    /GRANT USAGE ON SCHEMA "billing_relay_boss" TO "ferry_relay";/,
  );
  assert.doesNotMatch(
    grantsSql({ role: 'ferry_relay', for: 'relay', schema: 'billing' }),
    /"billing_boss"/,
    "the relay gets nothing of the inbox's parking lot",
  );
});
