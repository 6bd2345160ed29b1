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

/** Validates then quotes a schema name: the form every SQL statement uses. */
export function schemaIdentifier(schema: unknown): string {
  return quoteIdentifier(validateIdentifier(schema, 'schema'));
}

/** The LISTEN/NOTIFY channel the publisher notifies and the relay listens on. */
export function notifyChannel(schema: string): string {
  return `ferry_${validateIdentifier(schema, 'schema')}`;
}

/**
 * The pg-boss schema of a Ferry schema: `<schema>_boss`, one rule for every part (the relay's
 * prune job, the inbox's parking lot, the idempotency janitor). The inbox used `pgboss` before
 * (issue 16); pass `bossSchema: 'pgboss'` to keep parked events that live there.
 */
export function bossSchemaFor(schema: string): string {
  return `${schema}_boss`.slice(0, 63);
}
