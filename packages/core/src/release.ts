import { readFileSync } from 'node:fs';

/**
 * The Ferry release this code belongs to: the version of `@ferry/core`, which
 * every Ferry package of one release shares. Relays report it in their
 * heartbeat (`ferry status`, `ferry doctor` show it per instance); `ferry
 * --version` prints it.
 */
export const FERRY_RELEASE: string = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string })
  .version;

/**
 * What relays of one schema must agree on, as a number that grows when that
 * changes (lease rules, what a mark means, the order rules). A schema admits
 * relays whose protocol is at least its floor (settings
 * `relay_protocol_floor`, outbox migration 000013), and the database refuses
 * a lease to any other. 1: leases with a term (migration 000010), reports
 * nothing. 2: reports its release and protocol, honours the floor. 3: marks
 * delete pending rows instead of updating the event row (migration 000015).
 */
export const RELAY_PROTOCOL = 3;

/**
 * The lowest floor this release's relay works on: outbox migration 000015
 * raised the floor to 3 when it moved the delivery state beside the event
 * row, so a schema whose floor is lower has not been migrated to the tables
 * this relay's statements read and write.
 */
export const RELAY_SCHEMA_FLOOR = 3;

/** The settings row that holds a schema's relay floor. */
export const RELAY_FLOOR_SETTING = 'relay_protocol_floor';

/** The schema's relay floor (one row, `value` text; none before migration 000013); `schemaSql` is already quoted. */
export function relayFloorSql(schemaSql: string): string {
  return `SELECT value FROM ${schemaSql}.settings WHERE name = '${RELAY_FLOOR_SETTING}'`;
}
