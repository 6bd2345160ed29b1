// Keeping relays from before leases out (one job): those took a lane by a session advisory lock, so
// a relay of this release holds those locks on its lease connection for every lane it can get, and
// such an old relay started beside it finds none.
import { LEGACY_LANE_LOCKS_SQL } from '../sql/leases.js';
import type { LeaseConnection } from './lease-connection.js';

/** A stable non-negative 31-bit hash (FNV-1a) of a text: advisory lock namespaces per schema. */
export function lockNamespace(text: string): number {
  let h = 0x811c9dc5;
  for (const byte of Buffer.from(text, 'utf8')) {
    h ^= byte;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h & 0x7fffffff;
}

/** The lanes whose pre-lease advisory lock this instance's lease connection holds. */
export class LegacyLaneLocks {
  /** `lockNamespace('ferry:lanes:<schema>')`; undefined: take none. */
  readonly #namespace: number | undefined;
  #held: number[] = [];

  constructor(namespace: number | undefined) {
    this.#namespace = namespace;
  }

  /** The lease connection changed or ended: session locks end with the session. */
  forget(): void {
    this.#held = [];
  }

  /**
   * Called with each renewal until every lane's lock is held (by this instance or another of this
   * release). A failure here is no lease failure: the renewal went through, and the next one tries again.
   */
  async topUp(conn: LeaseConnection, laneCount: number): Promise<void> {
    if (this.#namespace === undefined || this.#held.length >= laneCount) return;
    const locked = await conn.query<{ lane: number }>(LEGACY_LANE_LOCKS_SQL, [this.#namespace, laneCount, this.#held]).catch(() => []);
    this.#held.push(...locked.map((r) => r.lane));
  }
}
