import { FERRY_RELEASE, MigrationError, RELAY_FLOOR_SETTING, RELAY_PROTOCOL, RELAY_SCHEMA_FLOOR, relayFloorSql } from '@ferry/core';
import type pg from 'pg';
import { NotMigratedError } from '../errors.js';

/**
 * The check a relay makes before it connects to NATS: the schema admits its
 * relay protocol (outbox migration 000013's floor). A schema without a floor
 * was not migrated by this release: the heartbeat this relay writes would not
 * fit it. A floor above this relay's protocol means a newer release migrated
 * the schema and older relays must not work on it; the database would refuse
 * every lease anyway (relay_leases' trigger), so the relay says why and stops
 * instead of polling with no lanes. Exit 3, as for a schema migrated by a
 * newer Ferry. A floor below `RELAY_SCHEMA_FLOOR` means the schema lacks a
 * migration this relay's statements need (000015's pending table): the relay
 * would take lanes from the earlier release's relays and fail every claim,
 * so it refuses to start.
 */
export async function checkRelayFloor(pool: pg.Pool, schemaSql: string, schema: string): Promise<number> {
  const { rows } = await pool.query<{ value: string }>(relayFloorSql(schemaSql));
  const value = rows[0]?.value;
  if (value === undefined) {
    throw new NotMigratedError(
      `schema "${schema}" has no relay floor (settings ${RELAY_FLOOR_SETTING}, outbox migration 13): it was migrated by an older Ferry; run ferry migrate --schema ${schema} with this release (${FERRY_RELEASE}) first`,
    );
  }
  const floor = Number(value);
  if (!Number.isInteger(floor) || floor > RELAY_PROTOCOL) {
    throw new MigrationError(
      `schema "${schema}" admits relay protocol ${value} or later (settings ${RELAY_FLOOR_SETTING}); this relay is release ${FERRY_RELEASE}, relay protocol ${RELAY_PROTOCOL}: run the Ferry release that migrated the schema`,
    );
  }
  if (floor < RELAY_SCHEMA_FLOOR) {
    throw new NotMigratedError(
      `schema "${schema}" admits relay protocol ${floor} or later (settings ${RELAY_FLOOR_SETTING}): it was migrated by an earlier Ferry, without the tables this relay (release ${FERRY_RELEASE}, relay protocol ${RELAY_PROTOCOL}) reads; run ferry migrate --schema ${schema} with this release first`,
    );
  }
  return floor;
}
