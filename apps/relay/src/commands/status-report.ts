import type { InboxHealth } from '@ferry/inbox';
import type { RelayBeforeLeases, RelayInstance } from '../cli/relay-instances.js';
import type { BlockedKey } from '../sql/blocked-keys.js';

// What `ferry status` reports, apart from how it is read (status.ts) and judged (cli/status-check.ts).

export interface LaneStatus {
  lane: number;
  /** Unpublished, not dead rows. */
  pending: number;
  dead: number;
  /** Age of the oldest pending row in seconds (0 when none). */
  oldestPendingSeconds: number;
  /** Instance leasing the lane, or null when no relay holds it. */
  owner: string | null;
  /** Seconds since the owner last renewed the lease (null when never held). */
  leaseAgeSeconds: number | null;
  /** The lease's epoch: one more on every take. */
  epoch: string;
  /** The owner's term ran out without a renewal (frozen, cut off or stuck): a live instance takes the lane on its next poll. */
  overdue: boolean;
}

/** The `--json` output of `ferry status`. */
export interface StatusReport {
  schema: string;
  laneCount: number;
  pending: number;
  dead: number;
  oldestPendingSeconds: number;
  publishedLastMinute: number;
  lanes: LaneStatus[];
  instances: RelayInstance[];
  /** The live instances' releases when they differ (each with its instance ids), else null: see `releaseMix`. */
  mixedReleases: string | null;
  /** Relays from before leases holding lanes by advisory lock: sending beside the others until stopped. */
  relaysBeforeLeases: RelayBeforeLeases[];
  /** Lanes with pending rows that no live relay leases (free, or overdue). */
  unownedLanesWithBacklog: number[];
  /** Keys held behind a failed row (backing off or dead); their later events wait. */
  blockedKeys: number;
  /** The oldest of them (at most 20), each with its reason and how many events wait behind it. */
  blocked: BlockedKey[];
  /** The schema holds no outbox, only inbox tables (a consumer's database): the outbox numbers are all 0. */
  inboxOnly: boolean;
  /** The inboxes whose tables are in this schema (their parked events per consumer, and each running inbox), or null when it holds none. */
  inbox: InboxHealth | null;
}
