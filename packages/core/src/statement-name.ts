import { createHash } from 'node:crypto';

/**
 * A statement with a name for node-postgres to prepare it under, once per
 * connection: `ferry_<role>_` and 16 hex digits of the text's SHA-1, so two
 * schemas (two texts) never share a name on one connection, and the name
 * stays within PostgreSQL's 63 bytes.
 */
export function namedStatement(role: string, text: string): { name: string; text: string } {
  return { name: `ferry_${role}_${createHash('sha1').update(text).digest('hex').slice(0, 16)}`, text };
}
