import { RELAY_FLOOR_SETTING } from '@ferry/core';

/**
 * Live relay instances (an unexpired heartbeat row, see lane-leaser.ts), the
 * lanes each holds under an unexpired lease, the release and relay protocol
 * each reports (null for a relay released before outbox migration 000013)
 * and the schema's relay floor (null before 000013). The two columns are
 * read through `to_jsonb(i)` so the statement also runs on a schema that
 * does not have them yet.
 */
export function relayInstancesSql(schemaSql: string): string {
  return `SELECT i.instance, i.backend_pid AS pid, i.application_name, i.client_addr, i.started_at AS backend_start,
       to_jsonb(i) ->> 'release' AS release, (to_jsonb(i) ->> 'protocol')::int AS protocol,
       (SELECT s.value::int FROM ${schemaSql}.settings s WHERE s.name = '${RELAY_FLOOR_SETTING}') AS floor,
       coalesce((SELECT array_agg(l.lane ORDER BY l.lane) FROM ${schemaSql}.relay_leases l
                  WHERE l.owner = i.instance AND l.expires_at > now()), '{}') AS lanes
  FROM ${schemaSql}.relay_instances i
 WHERE i.expires_at > now()
 ORDER BY i.started_at, i.instance`;
}

export interface RelayInstanceRow {
  instance: string;
  pid: number;
  application_name: string | null;
  client_addr: string | null;
  backend_start: Date | null;
  release: string | null;
  protocol: number | null;
  floor: number | null;
  lanes: number[];
}

/**
 * Every lane's lease: its owner (null when free), epoch, seconds since its
 * last renewal, and whether its term ran out without a renewal (`overdue`:
 * the owner is frozen, cut off or stuck; the next poll of a live instance
 * takes the lane).
 */
export function laneLeasesSql(schemaSql: string): string {
  return `SELECT l.lane, l.owner, l.epoch::text AS epoch,
       extract(epoch FROM now() - l.renewed_at)::float8 AS age,
       (l.owner IS NOT NULL AND l.expires_at <= now()) AS overdue
  FROM ${schemaSql}.relay_leases l
 ORDER BY l.lane`;
}

export interface LaneLeaseRow {
  lane: number;
  owner: string | null;
  epoch: string;
  age: number | null;
  overdue: boolean;
}

/**
 * Sessions that hold lanes of this schema as relays from before leases did
 * (outbox migration 000010): session advisory locks in namespace `$1`
 * (`lockNamespace('ferry:lanes:<schema>')`), lane = objid. Lease connections
 * of this release's relays hold them too, so that such a relay finds no lane:
 * those are left out by their heartbeat's backend pid. What remains is a
 * relay from before leases, running.
 */
export function relaysBeforeLeasesSql(schemaSql: string): string {
  return `SELECT l.pid, a.application_name, a.client_addr::text AS client_addr, array_agg(l.objid::int ORDER BY l.objid) AS lanes
  FROM pg_catalog.pg_locks l LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = $1::int::oid
   AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = current_database())
   AND l.pid NOT IN (SELECT i.backend_pid FROM ${schemaSql}.relay_instances i)
 GROUP BY l.pid, a.application_name, a.client_addr
 ORDER BY l.pid`;
}
