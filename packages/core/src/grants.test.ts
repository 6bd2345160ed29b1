import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ValidationError } from './errors.js';
import { type GrantTarget, grantsSql, inboxPolicyName } from './grants.js';
import { bossSchemaFor, idempotencyBossSchemaFor, relayBossSchemaFor } from './identifiers.js';

test('grants - a hostile role, schema or boss schema is refused before any SQL text is built', () => {
  for (const bad of ['x"; drop table t; --', 'ferrу', 'ＦＥＲＲＹ', 'r'.repeat(10_240), '', 'Ferry']) {
    for (const options of [
      { role: bad, for: 'relay' as const },
      { role: 'ferry_relay', for: 'relay' as const, schema: bad },
      { role: 'ferry_inbox', for: 'inbox' as const, bossSchema: bad },
      { role: 'ferry_inbox', for: 'inbox' as const, consumers: ['ok', bad] },
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
  // Its one REVOKE takes back any write on the audit trail (outbox migration 000017).
  assert.doesNotMatch(sql, /GRANT [^;]*(SELECT|INSERT|UPDATE|DELETE)|CREATE|ALL TABLES/);
});

test('grants - the relay changes only delivery state, never an event row, reads the migrations, and runs its own pg-boss', () => {
  const relay = grantsSql({ role: 'ferry_relay', for: 'relay' });
  assert.match(relay, /GRANT SELECT, DELETE ON "ferry"\.outbox TO "ferry_relay";/);
  // An earlier Ferry's UPDATE on the outbox is revoked, so re-applying tightens an old role.
  assert.match(relay, /REVOKE UPDATE ON "ferry"\.outbox FROM "ferry_relay";/);
  assert.match(relay, /GRANT SELECT, DELETE ON "ferry"\.outbox_pending TO "ferry_relay";/);
  assert.match(relay, /GRANT UPDATE \(attempts, next_attempt_at, last_error, dead_at\) ON "ferry"\.outbox_pending TO "ferry_relay";/);
  assert.match(relay, /GRANT SELECT, INSERT ON "ferry"\.outbox_published TO "ferry_relay";/);
  assert.doesNotMatch(relay, /DELETE[^;]*outbox_published/);
  // No pending row is the relay's to add: what is pending is what publishers committed.
  assert.doesNotMatch(relay, /INSERT[^;]*outbox_pending/);
  assert.match(relay, /GRANT SELECT ON "ferry"\.migrations TO "ferry_relay";/);
  assert.match(relay, /ON ALL TABLES IN SCHEMA "ferry_relay_boss" TO "ferry_relay";/);
  assert.doesNotMatch(relay, /"ferry_boss"|key_versions|INSERT[^;]*outbox |GRANT [^;]*UPDATE[^;]* ON "ferry"\.outbox /);
  // The relay's pg-boss is not an option: the daemon has none.
  assert.equal(grantsSql({ role: 'ferry_relay', for: 'relay', bossSchema: 'elsewhere' }), relay);
});

test('grants - an inbox role gets DML on the consumer tables, a policy per consumer it runs, and its pg-boss', () => {
  const inbox = grantsSql({ role: 'ferry_inbox', for: 'inbox', schema: 'billing', bossSchema: 'billing_boss', consumers: ['a', 'b', 'a'] });
  assert.match(
    inbox,
    /ON "billing"\.inbox_versions, "billing"\.inbox_messages, "billing"\.inbox_early, "billing"\.inbox_instances TO "ferry_inbox";/,
  );
  for (const t of ['inbox_versions', 'inbox_messages', 'inbox_early', 'inbox_instances']) {
    assert.ok(inbox.includes(`DROP POLICY IF EXISTS "ferry_role_ferry_inbox" ON "billing".${t};`), t);
    assert.ok(
      inbox.includes(
        `CREATE POLICY "ferry_role_ferry_inbox" ON "billing".${t} FOR ALL TO "ferry_inbox" USING (consumer IN ('a', 'b')) WITH CHECK (consumer IN ('a', 'b'));`,
      ),
      t,
    );
  }
  assert.match(inbox, /BEGIN;\nDROP POLICY[\s\S]*COMMIT;/);
  assert.match(inbox, /GRANT USAGE ON SCHEMA "billing_boss" TO "ferry_inbox";/);
  assert.doesNotMatch(inbox, /WARNING/);
  const open = grantsSql({ role: 'ferry_inbox', for: 'inbox' });
  assert.match(open, /-- WARNING: no --consumer given/);
  assert.match(open, /USING \(true\) WITH CHECK \(true\)/);
  assert.match(open, /ON ALL TABLES IN SCHEMA "ferry_boss" TO "ferry_inbox";/);
  assert.throws(() => grantsSql({ role: 'r', for: 'relay', consumers: ['a'] }), ValidationError);
});

test('grants - idempotency and reader get only their tables', () => {
  const idem = grantsSql({ role: 'edge', for: 'idempotency', schema: 'api' });
  assert.match(idem, /GRANT SELECT, INSERT, UPDATE, DELETE ON "api"\.idempotency_keys TO "edge";/);
  assert.match(idem, /ON ALL TABLES IN SCHEMA "api_idempotency_boss" TO "edge";/);
  assert.doesNotMatch(idem, /outbox|inbox|"api_boss"/);
  const reader = grantsSql({ role: 'ops', for: 'reader' });
  assert.match(reader, /GRANT SELECT ON "ferry"\.migrations TO "ops";/);
  assert.match(
    reader,
    /GRANT SELECT ON "ferry"\.settings, "ferry"\.outbox, "ferry"\.outbox_pending, "ferry"\.outbox_published, "ferry"\.outbox_events TO "ops";/,
  );
  assert.doesNotMatch(reader, /GRANT [^;]*(INSERT|UPDATE|DELETE)|boss/);
});

test('grants - the console reads the audit trail, inbox_versions and the parking lot, and changes nothing', () => {
  const console_ = grantsSql({ role: 'ops', for: 'console', schema: 'app', bossSchema: 'app_parked' });
  assert.match(console_, /GRANT SELECT ON "app"\.operator_actions TO "ops";/);
  assert.match(console_, /GRANT SELECT ON "app"\.inbox_versions, "app"\.inbox_instances TO "ops";/);
  assert.match(console_, /GRANT SELECT ON "app_parked"\.job TO "ops";/);
  assert.doesNotMatch(console_, /GRANT [^;]*(INSERT|UPDATE|DELETE|TRUNCATE|EXECUTE)/);
});

test('grants - no part writes the audit trail directly: the relay records through the function, every part revokes writes', () => {
  const relay = grantsSql({ role: 'r', for: 'relay' });
  assert.match(relay, /GRANT SELECT ON "ferry"\.operator_actions TO "r";/);
  assert.match(relay, /GRANT EXECUTE ON FUNCTION "ferry"\.record_operator_action\(text, text, text, jsonb, integer, text\) TO "r";/);
  assert.doesNotMatch(relay, /GRANT [^;]*(INSERT|UPDATE|DELETE|TRUNCATE)[^;]* ON "ferry"\.operator_actions/);
  const revoke = 'REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON "ferry".operator_actions FROM "r";';
  for (const target of ['publisher', 'relay', 'reader', 'console'] as const) {
    assert.ok(grantsSql({ role: 'r', for: target }).split('\n').includes(revoke), target);
  }
  // The inbox's and the idempotency keys' schema may hold no outbox migrations: revoked only where the table is.
  for (const target of ['inbox', 'idempotency'] as const) {
    assert.ok(
      grantsSql({ role: 'r', for: target }).includes(
        `DO $$ BEGIN IF to_regclass('"ferry".operator_actions') IS NOT NULL THEN ${revoke} END IF; END $$;`,
      ),
      target,
    );
  }
});

test('grants - relay, inbox, idempotency, reader and console never CREATE', () => {
  for (const target of ['relay', 'inbox', 'idempotency', 'reader', 'console'] as const) {
    assert.doesNotMatch(grantsSql({ role: 'r', for: target }), /CREATE (TABLE|SCHEMA)|ALL PRIVILEGES|GRANT CREATE/, target);
  }
});

test('grants - each part has its own pg-boss, also for a schema too long for the suffix', () => {
  for (const schema of ['ferry', 'a'.repeat(52), 'b'.repeat(59), 'c'.repeat(63)]) {
    const names = [bossSchemaFor(schema), relayBossSchemaFor(schema), idempotencyBossSchemaFor(schema)];
    for (const n of names) assert.ok(n.length <= 63, n);
    // (bossSchemaFor of a 63-character schema is the schema itself: the inbox's default, left as it was.)
    assert.equal(new Set([bossSchemaFor(schema), relayBossSchemaFor(schema), idempotencyBossSchemaFor(schema)]).size, 3, names.join(' '));
    for (const n of names.slice(1)) assert.notEqual(n, schema);
    assert.ok(relayBossSchemaFor(schema).endsWith('_relay_boss'));
    assert.ok(idempotencyBossSchemaFor(schema).endsWith('_idempotency_boss'));
  }
  // Two long schemas that share their first characters still get two pg-boss schemas.
  assert.notEqual(relayBossSchemaFor(`${'d'.repeat(60)}_x`), relayBossSchemaFor(`${'d'.repeat(60)}_y`));
});

test('grants - a role name too long for its policy name is shortened with a digest, the way inbox migration 000006 does', () => {
  assert.equal(inboxPolicyName('billing'), 'ferry_role_billing');
  const long = `r${'x'.repeat(60)}`;
  const name = inboxPolicyName(long);
  assert.ok(name.length <= 63);
  assert.match(name, /^ferry_role_rx{39}_[0-9a-f]{8}$/);
  assert.notEqual(name, inboxPolicyName(`r${'x'.repeat(59)}y`));
});
