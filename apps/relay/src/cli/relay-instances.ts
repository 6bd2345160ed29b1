import { quoteIdentifier } from '@ferry/core';
import type pg from 'pg';
import { lockNamespace } from '../daemon/lease-legacy-locks.js';
import { type RelayInstanceRow, relayInstancesSql, relaysBeforeLeasesSql } from '../sql/relay-instances.js';

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
  /** The Ferry release the instance reports, or null: a relay released before outbox migration 000013 reports none. */
  release: string | null;
  /** Its relay protocol, or null (such a relay is protocol 1 or 0). */
  protocol: number | null;
  /** The schema's relay floor keeps it from every lease (it may still be sending until its term ends). */
  belowFloor: boolean;
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
      release: r.release,
      protocol: r.protocol,
      belowFloor: r.floor !== null && (r.protocol === null || r.protocol < r.floor),
      lanes: r.lanes.map(Number),
    };
  });
}

/** How `ferry status` and `ferry doctor` name an instance's release. */
export function describeRelease(i: Pick<RelayInstance, 'release' | 'protocol'>): string {
  return i.release === null
    ? 'release unknown (older than release reporting)'
    : `release ${i.release} (relay protocol ${i.protocol ?? '?'})`;
}

/**
 * The releases of live instances when they are not all the same, each with
 * its instance ids (`release unknown …: 3fa2c1d0; release 0.1.0 (relay
 * protocol 2): 9b0e77aa`), or null when they agree. A mix is the window of a
 * rolling upgrade at best; an instance below the schema's floor is refused
 * every lease and must be stopped.
 */
export function releaseMix(instances: readonly RelayInstance[]): string | null {
  const byRelease = new Map<string, string[]>();
  for (const i of instances) {
    const name = describeRelease(i);
    byRelease.set(name, [...(byRelease.get(name) ?? []), i.instance]);
  }
  if (byRelease.size < 2) return null;
  return [...byRelease].map(([name, ids]) => `${name}: ${ids.join(', ')}`).join('; ');
}

/** A relay from before leases (outbox migration 000010) holding lanes of the schema by session advisory lock. */
export interface RelayBeforeLeases {
  /** Its lease connection's PostgreSQL backend pid. */
  pid: number;
  applicationName: string | null;
  clientAddr: string | null;
  lanes: number[];
}

/**
 * Relays from before leases running on a schema: they never read the leases
 * or the floor, so only their advisory locks show them (see
 * relaysBeforeLeasesSql). Such a relay sends on the lanes it locked, beside
 * this release's relays, until it is stopped.
 */
export async function relaysBeforeLeases(pool: pg.Pool, schema: string): Promise<RelayBeforeLeases[]> {
  const { rows } = await pool.query<{ pid: number; application_name: string | null; client_addr: string | null; lanes: number[] }>(
    relaysBeforeLeasesSql(quoteIdentifier(schema)),
    [lockNamespace(`ferry:lanes:${schema}`)],
  );
  return rows.map((r) => ({ pid: r.pid, applicationName: r.application_name, clientAddr: r.client_addr, lanes: r.lanes.map(Number) }));
}

/** How `ferry status` and `ferry doctor` name one. */
export function describeRelayBeforeLeases(r: RelayBeforeLeases): string {
  return `backend pid ${r.pid} (${r.applicationName || 'no application_name'}${r.clientAddr ? ` from ${r.clientAddr}` : ''}) lanes ${r.lanes.join(',')}`;
}
