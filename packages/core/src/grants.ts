import { ValidationError } from './errors.js';
import { bossSchemaFor, quoteIdentifier, validateIdentifier } from './identifiers.js';

/** The Ferry parts a least-privileged role can be granted for. */
export const GRANT_TARGETS = ['publisher', 'relay', 'inbox'] as const;
export type GrantTarget = (typeof GRANT_TARGETS)[number];

export interface GrantOptions {
  /** The role to grant to (validated as an identifier). */
  role: string;
  /** Which part the role runs. */
  for: GrantTarget;
  /** The Ferry schema (outbox for publisher/relay, inbox tables for inbox). Default `ferry`. */
  schema?: string;
  /**
   * The pg-boss schema the part uses: the relay's `<schema>_boss` (prune job), the
   * inbox's `bossSchema` (parking lot, also default `<schema>_boss`). Ignored for the publisher.
   */
  bossSchema?: string;
}

const PUBLISH_EVENT_ARGS = 'uuid, text, bigint, text, text, text, text, bytea, jsonb, timestamptz, text, boolean';
const PUBLISH_EVENTS_ARGS = 'uuid[], text[], bigint[], text[], text[], text[], text[], bytea[], jsonb[], timestamptz[], text, boolean';

/**
 * DML (never DDL) on a pg-boss schema that its owner installed beforehand
 * (`ferry migrate --boss`): pg-boss's queues are rows of its `queue` table
 * (Ferry never asks for a partitioned queue), so a role with these grants can
 * create queues, send, fetch, complete and schedule jobs, but create no table.
 */
function bossGrants(boss: string, role: string): string[] {
  return [
    `GRANT USAGE ON SCHEMA ${boss} TO ${role};`,
    `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ${boss} TO ${role};`,
    `GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA ${boss} TO ${role};`,
    `GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA ${boss} TO ${role};`,
  ];
}

/**
 * The GRANT statements one Ferry part needs, and no more; apply them as the
 * owner of the Ferry schema after `ferry migrate` (and, for the relay and the
 * inbox, after `ferry migrate --boss`, which installs pg-boss). The role needs
 * no CREATE anywhere.
 *
 * - publisher: EXECUTE on the two SECURITY DEFINER publish functions; no table privilege,
 *   so it can append events but neither read nor change outbox rows or key_versions.
 * - relay: read the settings, read/mark/prune outbox rows, keep and forget pruned ids; DML on `<schema>_boss`.
 * - inbox: read/write its version and message tables; DML on its pg-boss schema. The
 *   handlers' own tables are the application's to grant.
 */
export function grantsSql(options: GrantOptions): string {
  const role = quoteIdentifier(validateIdentifier(options.role, 'role'));
  const target = options.for;
  if (!GRANT_TARGETS.includes(target)) {
    throw new ValidationError('for', `grants are for one of ${GRANT_TARGETS.join(', ')}, got ${JSON.stringify(String(target))}`);
  }
  const schemaName = validateIdentifier(options.schema ?? 'ferry', 'schema');
  const s = quoteIdentifier(schemaName);
  const lines = [`-- Ferry ${target} grants for role ${role} on schema ${s}`, `GRANT USAGE ON SCHEMA ${s} TO ${role};`];
  if (target === 'publisher') {
    lines.push(
      `GRANT EXECUTE ON FUNCTION ${s}.publish_event(${PUBLISH_EVENT_ARGS}) TO ${role};`,
      `GRANT EXECUTE ON FUNCTION ${s}.publish_events(${PUBLISH_EVENTS_ARGS}) TO ${role};`,
    );
  } else if (target === 'relay') {
    const boss = quoteIdentifier(validateIdentifier(options.bossSchema ?? bossSchemaFor(schemaName), 'bossSchema'));
    lines.push(
      `GRANT SELECT ON ${s}.settings TO ${role};`,
      `GRANT SELECT, UPDATE, DELETE ON ${s}.outbox TO ${role};`,
      // The relay records that it waits for a NOTIFY (outbox migration 000007).
      `GRANT SELECT, INSERT, UPDATE, DELETE ON ${s}.relay_waiting TO ${role};`,
      // The prune job keeps each pruned id here for another retention (outbox migration 000006).
      `GRANT SELECT, INSERT, UPDATE, DELETE ON ${s}.published_ids TO ${role};`,
      `GRANT EXECUTE ON FUNCTION ${s}.event_digest(text, text, text, text, text, bytea, jsonb) TO ${role};`,
      // Lane leases with a term and the instances' heartbeats (outbox migration 000011).
      `GRANT SELECT, UPDATE ON ${s}.relay_leases TO ${role};`,
      `GRANT SELECT, INSERT, UPDATE, DELETE ON ${s}.relay_instances TO ${role};`,
      ...bossGrants(boss, role),
    );
  } else {
    const boss = quoteIdentifier(validateIdentifier(options.bossSchema ?? bossSchemaFor(schemaName), 'bossSchema'));
    lines.push(
      `GRANT SELECT, INSERT, UPDATE, DELETE ON ${s}.inbox_versions, ${s}.inbox_messages, ${s}.inbox_early TO ${role};`,
      ...bossGrants(boss, role),
    );
  }
  return `${lines.join('\n')}\n`;
}
