import { createHash } from 'node:crypto';
import { describeValue, ValidationError } from './errors.js';

/** What Ferry accepts for a schema, consumer or other SQL identifier it is given. */
export const IDENTIFIER_PATTERN = /^[a-z_][a-z0-9_]{0,62}$/;

/**
 * Validates a user-supplied SQL identifier (schema name, consumer name) and
 * returns it. Only lowercase ASCII letters, digits and `_`, starting with a
 * letter or `_`, at most 63 characters: names that need no quoting anywhere.
 */
export function validateIdentifier(value: unknown, what = 'schema'): string {
  if (typeof value !== 'string' || !IDENTIFIER_PATTERN.test(value)) {
    throw new ValidationError(
      what,
      `invalid ${what} ${describeValue(value, 40)}: use 1-63 characters of a-z, 0-9 and _, starting with a letter or _ (pattern ${IDENTIFIER_PATTERN.source})`,
    );
  }
  return value;
}

/** Quotes an identifier for SQL. Always validate first; this is the second fence. */
export function quoteIdentifier(value: string): string {
  return `"${value.replaceAll('"', '""')}"`;
}

/** Validates then quotes a schema name (`what` names the option in the error): the form every SQL statement uses. */
export function schemaIdentifier(schema: unknown, what = 'schema'): string {
  return quoteIdentifier(validateIdentifier(schema, what));
}

/** The LISTEN/NOTIFY channel the publisher notifies and the relay listens on. */
export function notifyChannel(schema: string): string {
  return `ferry_${validateIdentifier(schema, 'schema')}`;
}

/**
 * The pg-boss schema of a Ferry schema: `<schema>_boss`, the inbox's parking lot (parked events
 * are real data, so this default stays where earlier inboxes put it). The inbox used `pgboss`
 * before (issue 16); `ferry inbox parked move --from-boss-schema pgboss` moves parked events left there.
 */
export function bossSchemaFor(schema: string): string {
  return `${schema}_boss`.slice(0, 63);
}

/**
 * Where inbox releases before issue 16 kept the parking lot: pg-boss's own default schema. The
 * inbox and `ferry inbox parked list` look there for parked events a consumer still has, so an
 * upgrade leaves nothing parked out of sight.
 */
export const OLD_BOSS_SCHEMA = 'pgboss';

/**
 * `<schema><suffix>` within PostgreSQL's 63 characters. A name too long keeps
 * the schema's first characters and adds 8 hex of its sha256, so two long
 * schemas never share a pg-boss and the suffix (which says whose it is) stays
 * whole: slicing, as `bossSchemaFor` does, would make a relay's and an
 * inbox's pg-boss of a 59-character schema differ only by a cut-off suffix,
 * and of a 63-character one both be the schema itself.
 */
function suffixed(schema: string, suffix: string): string {
  const name = `${schema}${suffix}`;
  if (name.length <= 63) return name;
  const digest = createHash('sha256').update(schema).digest('hex').slice(0, 8);
  return `${schema.slice(0, 63 - suffix.length - 9)}_${digest}${suffix}`;
}

/**
 * The relay's maintenance pg-boss: `<schema>_relay_boss`. It holds only the
 * `ferry-prune` cron schedule and its short-lived jobs, so it lives apart
 * from the inbox's parking lot (`bossSchemaFor`): the relay's role gets no
 * privilege on parked events, and an inbox's role none on the prune schedule.
 */
export function relayBossSchemaFor(schema: string): string {
  return suffixed(validateIdentifier(schema, 'schema'), '_relay_boss');
}

/**
 * The idempotency janitor's pg-boss: `<schema>_idempotency_boss`, apart from
 * the inbox's parking lot and the relay's schedule for the same reason as
 * `relayBossSchemaFor`.
 */
export function idempotencyBossSchemaFor(schema: string): string {
  return suffixed(validateIdentifier(schema, 'schema'), '_idempotency_boss');
}
