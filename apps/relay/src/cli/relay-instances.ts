import { quoteIdentifier } from '@ferry/core';
import type pg from 'pg';
import { type RelayInstanceRow, relayInstancesSql } from '../sql/relay-instances.js';

export interface RelayInstance {
  /** The relay's instance id (from its lease connection's application_name), or `pid:<backend pid>`. */
  instance: string;
  /** PostgreSQL backend pid of the lease connection at its last renewal (not the relay's process: see `relayPid`). */
  pid: number;
  /** The relay process's own pid and host, or null for a relay older than this field. */
  relayPid: number | null;
  host: string | null;
  applicationName: string;
  clientAddr: string | null;
  /** When the instance first renewed its heartbeat. */
  since: string | null;
  /** Lanes this instance leases, ascending. */
  lanes: number[];
}

/** Live relay instances of a schema and the lanes each leases (`ferry status`, `ferry doctor`, `ferry verify`). */
export async function relayInstances(pool: pg.Pool, schema: string): Promise<RelayInstance[]> {
  const { rows } = await pool.query<RelayInstanceRow>(relayInstancesSql(quoteIdentifier(schema)));
  return rows.map((r) => {
    const app = r.application_name ?? '';
    const m = /^.*:([0-9a-f]+):lease(?::(\d+)@(.*))?$/.exec(app);
    return {
      instance: r.instance,
      pid: r.pid,
      relayPid: m?.[2] ? Number(m[2]) : null,
      host: m?.[3] || null,
      applicationName: app,
      clientAddr: r.client_addr,
      since: r.backend_start?.toISOString() ?? null,
      lanes: r.lanes.map(Number),
    };
  });
}
