import { createHash } from 'node:crypto';
import { ValidationError } from './errors.js';
import { bossSchemaFor, idempotencyBossSchemaFor, quoteIdentifier, relayBossSchemaFor, validateIdentifier } from './identifiers.js';

/**
 * The Ferry parts a least-privileged role can be granted for. `reader` is the
 * read-only operator: `ferry status`, `ferry doctor`, `ferry dlq list|show`,
 * `ferry replay` (it reads the outbox and sends to NATS) and
 * `ferry migrate --dry-run`. `console` is `ferry console --read-only`: the
 * reader's grants, the audit trail, the inbox's versions and parking lot.
 */
export const GRANT_TARGETS = ['publisher', 'relay', 'inbox', 'idempotency', 'reader', 'console'] as const;
export type GrantTarget = (typeof GRANT_TARGETS)[number];

/**
 * What `grantsSql` prints the grants of.
 *
 * @example
 * grantsSql({ role: 'billing_inbox', for: 'inbox', schema: 'ferry', consumers: ['billing'] });
 */
export interface GrantOptions {
  /** The role to grant to (validated as an identifier). */
  role: string;
  /** Which part the role runs. */
  for: GrantTarget;
  /**
   * The Ferry schema: the outbox's for publisher, relay and reader, the inbox
   * tables' for inbox, `idempotency_keys`'s for idempotency. Default `ferry`.
   */
  schema?: string;
  /**
   * The pg-boss schema the part uses. The relay's is always `<schema>_relay_boss`
   * (`relayBossSchemaFor`; the daemon has no option for it), so this is for the
   * inbox (its `bossSchema`, default `<schema>_boss`) and the idempotency janitor
   * (its `bossSchema`, default `<schema>_idempotency_boss`). Ignored otherwise.
   */
  bossSchema?: string;
  /**
   * Inbox only: the consumers the role may read and write the rows of
   * (row-level security, inbox migration 000006). Empty or left out: every
   * consumer's, and the SQL says so in a warning comment.
   */
  consumers?: readonly string[];
}

const PUBLISH_EVENT_ARGS = 'uuid, text, bigint, text, text, text, text, bytea, jsonb, timestamptz, text, boolean';
const PUBLISH_EVENTS_ARGS = 'uuid[], text[], bigint[], text[], text[], text[], text[], bytea[], jsonb[], timestamptz[], text, boolean';
/** `record_operator_action(actor, via, action, filter, rows, outcome)`, outbox migration 000017. */
const RECORD_ACTION_ARGS = 'text, text, text, jsonb, integer, text';

/**
 * No role but the owner writes the audit trail (outbox migration 000017): every
 * part's grants take back whatever an earlier grant (an earlier Ferry's relay
 * grants held INSERT) or a schema-wide `GRANT ALL` gave the role on it.
 * `ifExists` for the parts whose schema may hold no outbox migrations (the
 * inbox's, the idempotency keys'): there a plain REVOKE would fail on the
 * missing table.
 */
function auditRevoke(s: string, role: string, ifExists = false): string {
  const revoke = `REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON ${s}.operator_actions FROM ${role};`;
  if (!ifExists) return revoke;
  const table = `${s}.operator_actions`.replaceAll("'", "''");
  return `DO $$ BEGIN IF to_regclass('${table}') IS NOT NULL THEN ${revoke} END IF; END $$;`;
}

/** The consumer tables, each with a `consumer` column the row-level security policies test. */
const INBOX_TABLES = ['inbox_versions', 'inbox_messages', 'inbox_early', 'inbox_instances'] as const;
/** The columns of outbox_pending the relay may update (outbox migration 000015): the delivery state, not which event, key or lane. */
const PENDING_UPDATE_COLUMNS = ['attempts', 'next_attempt_at', 'last_error', 'dead_at'] as const;

/**
 * The name of a role's row-level security policy on the consumer tables:
 * `ferry_role_<role>`, or for a role too long for that, its first 40
 * characters and 8 hex of its md5. Inbox migration 000006 computes the same
 * name in SQL for the roles it finds, so a later `--print-grants` replaces
 * that policy rather than adding a second one beside it.
 */
export function inboxPolicyName(role: string): string {
  const name = `ferry_role_${validateIdentifier(role, 'role')}`;
  if (name.length <= 63) return name;
  return `ferry_role_${role.slice(0, 40)}_${createHash('md5').update(role).digest('hex').slice(0, 8)}`;
}

/**
 * DML (never DDL) on a pg-boss schema that its owner installed beforehand
 * (`ferry migrate --boss`): pg-boss's queues are rows of its `queue` table
 * (Ferry never asks for a partitioned queue), so a role with these grants can
 * create queues, send, fetch, complete and schedule jobs, but create no table.
 * Everything in that schema is open to the role, which is why each part has a
 * pg-boss schema of its own.
 */
function bossGrants(boss: string, role: string): string[] {
  return [
    `GRANT USAGE ON SCHEMA ${boss} TO ${role};`,
    `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ${boss} TO ${role};`,
    `GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA ${boss} TO ${role};`,
    `GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA ${boss} TO ${role};`,
  ];
}

/** A consumer name as a SQL literal; validated as an identifier first, so it needs no escaping, and gets it anyway. */
function consumerLiteral(consumer: string): string {
  return `'${validateIdentifier(consumer, 'consumer').replaceAll("'", "''")}'`;
}

/**
 * The role's policy on each consumer table, replaced in one transaction so the
 * role never runs a moment without one (with RLS on and no policy it would see
 * no rows and be refused every insert).
 */
function inboxPolicies(s: string, roleName: string, role: string, consumers: readonly string[]): string[] {
  const policy = quoteIdentifier(inboxPolicyName(roleName));
  const rule = consumers.length === 0 ? 'true' : `consumer IN (${consumers.map(consumerLiteral).join(', ')})`;
  const lines = consumers.length
    ? []
    : [
        `-- WARNING: no --consumer given: ${role} may read and write EVERY consumer's rows in these tables.`,
        '-- Print again with --consumer NAME (once per consumer the role runs) to confine it.',
      ];
  lines.push('BEGIN;');
  for (const t of INBOX_TABLES) {
    lines.push(
      `DROP POLICY IF EXISTS ${policy} ON ${s}.${t};`,
      `CREATE POLICY ${policy} ON ${s}.${t} FOR ALL TO ${role} USING (${rule}) WITH CHECK (${rule});`,
    );
  }
  lines.push('COMMIT;');
  return lines;
}

/**
 * The GRANT statements one Ferry part needs, and no more; apply them as the
 * owner of the Ferry schema after `ferry migrate` (and, for the relay, the
 * inbox and the idempotency janitor, after `ferry migrate --boss`, which
 * installs their pg-boss). The role needs no CREATE anywhere. No part's role
 * can change another part's rows: see docs/security.md, "Least privilege".
 *
 * - publisher: EXECUTE on the two SECURITY DEFINER publish functions; no table privilege,
 *   so it can append events but neither read nor change outbox rows or key_versions.
 * - relay: read the settings, the migrations and the outbox; never change an event
 *   row, only its delivery state (update and delete pending rows, record published
 *   ones: outbox migration 000015); delete (prune) rows; keep and forget
 *   pruned ids; DML on its own pg-boss, `<schema>_relay_boss`; EXECUTE on
 *   `record_operator_action`, the only way anyone but the owner writes the audit
 *   trail (outbox migration 000017). `ferry dlq retry|discard` and `ferry verify` run
 *   with these grants too.
 *
 * Every part's grants end with a REVOKE of any write on `operator_actions`.
 * - inbox: read/write the rows of its consumers (`consumers`; row-level security)
 *   in the four consumer tables (the fourth, inbox_instances, its heartbeats: inbox migration 000008); DML on its pg-boss schema (the parking lot).
 *   The handlers' own tables are the application's to grant.
 * - idempotency: read/write `idempotency_keys`; DML on the janitor's pg-boss.
 * - reader: SELECT on the outbox, its settings and the migrations: the read-only commands.
 *
 * @example
 * const sql = grantsSql({ role: 'ferry_relay', for: 'relay', schema: 'ferry' }); // apply with psql as the owner
 */
export function grantsSql(options: GrantOptions): string {
  const roleName = validateIdentifier(options.role, 'role');
  const role = quoteIdentifier(roleName);
  const target = options.for;
  if (!GRANT_TARGETS.includes(target)) {
    throw new ValidationError('for', `grants are for one of ${GRANT_TARGETS.join(', ')}, got ${JSON.stringify(String(target))}`);
  }
  const consumers = [...new Set(options.consumers ?? [])];
  if (consumers.length > 0 && target !== 'inbox') {
    throw new ValidationError('consumers', `consumers confine an inbox role; the ${target} has none`);
  }
  for (const c of consumers) validateIdentifier(c, 'consumer');
  const schemaName = validateIdentifier(options.schema ?? 'ferry', 'schema');
  const s = quoteIdentifier(schemaName);
  const lines = [`-- Ferry ${target} grants for role ${role} on schema ${s}`, `GRANT USAGE ON SCHEMA ${s} TO ${role};`];
  // Every part but the publisher may read which migrations ran: `ferry migrate --dry-run` and
  // `ferry doctor` compare them with this Ferry's, and they are version numbers, nothing else.
  const migrations = `GRANT SELECT ON ${s}.migrations TO ${role};`;
  if (target === 'publisher') {
    lines.push(
      `GRANT EXECUTE ON FUNCTION ${s}.publish_event(${PUBLISH_EVENT_ARGS}) TO ${role};`,
      `GRANT EXECUTE ON FUNCTION ${s}.publish_events(${PUBLISH_EVENTS_ARGS}) TO ${role};`,
    );
  } else if (target === 'relay') {
    const boss = quoteIdentifier(relayBossSchemaFor(schemaName));
    lines.push(
      migrations,
      `GRANT SELECT ON ${s}.settings TO ${role};`,
      `GRANT SELECT, DELETE ON ${s}.outbox TO ${role};`,
      // Earlier Ferry versions granted UPDATE on the outbox; since outbox migration 000015 the
      // relay never updates an event row: revoking it makes re-applying these grants tighten such a role.
      `REVOKE UPDATE ON ${s}.outbox FROM ${role};`,
      // An event's delivery state (000015): the relay updates a pending row's delivery columns (a
      // failure, a dlq retry), deletes it (the mark, a dlq discard) and records the event as published.
      // It adds no pending row, cannot point one at another event (seq), key or lane, and cannot erase
      // a delivery record (the prune's delete trigger runs as the schema's owner).
      `GRANT SELECT, DELETE ON ${s}.outbox_pending TO ${role};`,
      `GRANT UPDATE (${PENDING_UPDATE_COLUMNS.join(', ')}) ON ${s}.outbox_pending TO ${role};`,
      `GRANT SELECT, INSERT ON ${s}.outbox_published TO ${role};`,
      `GRANT SELECT ON ${s}.outbox_events TO ${role};`,
      // The relay records that it waits for a NOTIFY (outbox migration 000007).
      `GRANT SELECT, INSERT, UPDATE, DELETE ON ${s}.relay_waiting TO ${role};`,
      // The prune job keeps each pruned id here for another retention (outbox migration 000006).
      `GRANT SELECT, INSERT, UPDATE, DELETE ON ${s}.published_ids TO ${role};`,
      `GRANT EXECUTE ON FUNCTION ${s}.event_digest(text, text, text, text, text, bytea, jsonb) TO ${role};`,
      // Lane leases with a term and the instances' heartbeats (outbox migration 000010).
      `GRANT SELECT, UPDATE ON ${s}.relay_leases TO ${role};`,
      `GRANT SELECT, INSERT, UPDATE, DELETE ON ${s}.relay_instances TO ${role};`,
      // ferry dlq retry|discard record each action in the audit trail (outbox migration 000012), only
      // through the function that sets the time and the database role itself (000017): the relay's
      // role reads the trail and writes none of it directly (earlier Ferry versions granted INSERT).
      `GRANT SELECT ON ${s}.operator_actions TO ${role};`,
      `GRANT EXECUTE ON FUNCTION ${s}.record_operator_action(${RECORD_ACTION_ARGS}) TO ${role};`,
      ...bossGrants(boss, role),
    );
  } else if (target === 'inbox') {
    const boss = quoteIdentifier(validateIdentifier(options.bossSchema ?? bossSchemaFor(schemaName), 'bossSchema'));
    lines.push(
      migrations,
      `GRANT SELECT, INSERT, UPDATE, DELETE ON ${INBOX_TABLES.map((t) => `${s}.${t}`).join(', ')} TO ${role};`,
      ...inboxPolicies(s, roleName, role, consumers),
      ...bossGrants(boss, role),
    );
  } else if (target === 'idempotency') {
    const boss = quoteIdentifier(validateIdentifier(options.bossSchema ?? idempotencyBossSchemaFor(schemaName), 'bossSchema'));
    lines.push(migrations, `GRANT SELECT, INSERT, UPDATE, DELETE ON ${s}.idempotency_keys TO ${role};`, ...bossGrants(boss, role));
  } else {
    lines.push(
      migrations,
      `GRANT SELECT ON ${s}.settings, ${s}.outbox, ${s}.outbox_pending, ${s}.outbox_published, ${s}.outbox_events TO ${role};`,
    );
    // ferry status and doctor show the lane leases and the live relays (outbox migration 000010).
    lines.push(`GRANT SELECT ON ${s}.relay_leases, ${s}.relay_instances TO ${role};`);
    if (target === 'console') {
      const boss = quoteIdentifier(validateIdentifier(options.bossSchema ?? bossSchemaFor(schemaName), 'bossSchema'));
      lines.push(
        // The audit trail (outbox migration 000012), what inbox_versions recorded, and the parking lot's jobs: read only.
        `GRANT SELECT ON ${s}.operator_actions TO ${role};`,
        '-- The inbox part (leave it out when this schema has no inbox tables): SELECT only, every consumer.',
        `GRANT SELECT ON ${s}.inbox_versions, ${s}.inbox_instances TO ${role};`,
        ...inboxPolicies(s, roleName, role, consumers).filter((l) => !l.startsWith('--')),
        `GRANT USAGE ON SCHEMA ${boss} TO ${role};`,
        `GRANT SELECT ON ${boss}.job TO ${role};`,
      );
    }
  }
  // Every part, the relay's included: no role but the owner writes the audit trail (000017).
  lines.push(auditRevoke(s, role, target === 'inbox' || target === 'idempotency'));
  return `${lines.join('\n')}\n`;
}
