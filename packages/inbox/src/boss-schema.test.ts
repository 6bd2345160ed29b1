import assert from 'node:assert/strict';
import { test } from 'node:test';
import { bossSchemaFor, grantsSql } from '@ferry/core';
import { compileInboxOptions } from './options.js';
import type { InboxOptions } from './types.js';

const base = {
  pool: { query: async () => ({ rows: [] }), connect: async () => ({ query: async () => ({ rows: [] }), release() {} }) },
  nc: { request: async () => ({}) },
  stream: 'ORDERS',
  consumer: 'billing',
  handlers: {},
} as unknown as InboxOptions;

test('inbox options - the pg-boss schema follows the one rule of every part, <schema>_boss, unless given', () => {
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
    /GRANT USAGE ON SCHEMA "billing_boss" TO "ferry_relay";/,
  );
});
