/**
 * Live relay instances and the lanes each leases, from `pg_locks`: an instance
 * holds the advisory lock `(instance namespace $1, its random key)` on its
 * lease connection, and each lane as `(lane namespace $2, lane)` on the same
 * connection (see lane-leaser.ts), so both share a backend pid.
 */
export const RELAY_INSTANCES_SQL = `SELECT i.pid, a.application_name, a.client_addr::text AS client_addr, a.backend_start,
            coalesce((SELECT array_agg(l.objid::int ORDER BY l.objid) FROM pg_locks l
                       WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = $2::int::oid
                         AND l.pid = i.pid AND l.database = i.database), '{}') AS lanes
       FROM pg_locks i
       LEFT JOIN pg_stat_activity a ON a.pid = i.pid
      WHERE i.locktype = 'advisory' AND i.granted AND i.objsubid = 2 AND i.classid = $1::int::oid
        AND i.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      ORDER BY a.backend_start, i.pid`;

export interface RelayInstanceRow {
  pid: number;
  application_name: string | null;
  client_addr: string | null;
  backend_start: Date | null;
  lanes: number[];
}
