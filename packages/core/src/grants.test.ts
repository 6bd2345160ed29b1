import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ValidationError } from './errors.js';
import { type GrantTarget, grantsSql } from './grants.js';

test('grants - a hostile role, schema or boss schema is refused before any SQL text is built', () => {
  for (const bad of ['x"; drop table t; --', 'ferrу', 'ＦＥＲＲＹ', 'r'.repeat(10_240), '', 'Ferry']) {
    for (const options of [
      { role: bad, for: 'relay' as const },
      { role: 'ferry_relay', for: 'relay' as const, schema: bad },
      { role: 'ferry_inbox', for: 'inbox' as const, bossSchema: bad },
    ]) {
      assert.throws(() => grantsSql(options), ValidationError, JSON.stringify(options).slice(0, 80));
    }
  }
  assert.throws(() => grantsSql({ role: 'r', for: 'admin' as GrantTarget }), ValidationError);
});

test('grants - the publisher gets EXECUTE on the two publish functions and no table privilege', () => {
  const sql = grantsSql({ role: 'app_pub', for: 'publisher', schema: 'orders_ferry' });
  assert.match(sql, /GRANT USAGE ON SCHEMA "orders_ferry" TO "app_pub";/);
  assert.match(sql, /GRANT EXECUTE ON FUNCTION "orders_ferry"\.publish_event\(uuid, .*\) TO "app_pub";/);
  assert.match(sql, /GRANT EXECUTE ON FUNCTION "orders_ferry"\.publish_events\(uuid\[\], .*\) TO "app_pub";/);
  assert.doesNotMatch(sql, /SELECT|INSERT|UPDATE|DELETE|CREATE|ALL TABLES/);
});

test('grants - relay and inbox get DML on their tables and pg-boss schema, and never CREATE', () => {
  const relay = grantsSql({ role: 'ferry_relay', for: 'relay' });
  assert.match(relay, /GRANT SELECT, UPDATE, DELETE ON "ferry"\.outbox TO "ferry_relay";/);
  assert.match(relay, /ON ALL TABLES IN SCHEMA "ferry_boss" TO "ferry_relay";/);
  assert.doesNotMatch(relay, /key_versions|INSERT[^;]*outbox/);
  const inbox = grantsSql({ role: 'ferry_inbox', for: 'inbox', schema: 'billing', bossSchema: 'billing_boss' });
  assert.match(inbox, /ON "billing"\.inbox_versions, "billing"\.inbox_messages, "billing"\.inbox_early TO "ferry_inbox";/);
  assert.match(inbox, /GRANT USAGE ON SCHEMA "billing_boss" TO "ferry_inbox";/);
  for (const sql of [relay, inbox]) assert.doesNotMatch(sql, /CREATE|ALL PRIVILEGES|outbox.*INSERT/);
});
