import type { StatusReport } from '../commands/status-report.js';
import { count } from '../count.js';
import { CLI_DEFAULTS } from './defaults.js';

/** How many of each inbox problem, per consumer, `ferry status --check` tolerates (`--max-parked` and its two siblings). */
export interface InboxLimits {
  maxParked: number;
  maxFailedParked: number;
  maxWaitingKeys: number;
}

export const DEFAULT_INBOX_LIMITS: InboxLimits = Object.freeze({
  maxParked: CLI_DEFAULTS.statusMaxParked,
  maxFailedParked: CLI_DEFAULTS.statusMaxFailedParked,
  maxWaitingKeys: CLI_DEFAULTS.statusMaxWaitingKeys,
});

/** The `ferry status` flag of each inbox limit: the flag, its variable and its help (default from `DEFAULT_INBOX_LIMITS`). */
export const INBOX_LIMIT_FLAGS: Readonly<Record<keyof InboxLimits, readonly [string, string, string]>> = Object.freeze({
  maxParked: [
    '--max-parked <n>',
    'FERRY_STATUS_MAX_PARKED',
    'with --check: parked inbox events a consumer may have before it needs a person',
  ],
  maxFailedParked: [
    '--max-failed-parked <n>',
    'FERRY_STATUS_MAX_FAILED_PARKED',
    'with --check: failed parked events a consumer may have (each holds its key)',
  ],
  maxWaitingKeys: [
    '--max-waiting-keys <n>',
    'FERRY_STATUS_MAX_WAITING_KEYS',
    'with --check: keys a consumer may have waiting on a version nothing holds',
  ],
});

/**
 * What in a status needs a person, one phrase each (empty: nothing): what
 * `ferry status --check` exits 1 on. Dead events and blocked keys hold their
 * keys' later events; a lane with pending events and no live owner ships
 * nothing until a relay takes it; a relay below the schema's relay floor is an
 * old release left running after an upgrade. Per inbox consumer, above the
 * limits: parked events (each holds its key's later events in `sequential`
 * mode), failed parked events (held until retried or discarded) and keys
 * waiting on a version nothing holds (they never move by themselves).
 */
export function statusAttention(
  r: Pick<StatusReport, 'dead' | 'blockedKeys' | 'unownedLanesWithBacklog' | 'instances' | 'relaysBeforeLeases' | 'inbox'>,
  limits: InboxLimits = DEFAULT_INBOX_LIMITS,
): string[] {
  const out: string[] = [];
  if (r.dead > 0) out.push(`${count(r.dead, 'dead event')} (ferry dlq list)`);
  if (r.blockedKeys > 0) out.push(`${count(r.blockedKeys, 'blocked key')} behind a failed event (ferry status)`);
  if (r.unownedLanesWithBacklog.length > 0) {
    out.push(
      `${count(r.unownedLanesWithBacklog.length, 'lane')} with pending events and no live relay (${r.unownedLanesWithBacklog.join(',')})`,
    );
  }
  const below = r.instances.filter((i) => i.belowFloor);
  if (below.length > 0) {
    out.push(
      `${count(below.length, 'relay instance')} below the schema's relay floor, to stop (${below.map((i) => i.instance).join(',')})`,
    );
  }
  if (r.relaysBeforeLeases.length > 0) {
    out.push(
      `${count(r.relaysBeforeLeases.length, 'relay')} from before lane leases, to stop (backend pid ${r.relaysBeforeLeases.map((x) => x.pid).join(',')})`,
    );
  }
  for (const c of r.inbox?.consumers ?? []) {
    const list = `(ferry inbox parked list --consumer ${c.consumer})`;
    if (c.failedParked > limits.maxFailedParked) {
      out.push(
        `consumer ${c.consumer}: ${count(c.failedParked, 'failed parked event')}, above --max-failed-parked ${limits.maxFailedParked} ${list}`,
      );
    }
    if (c.keysWaitingOnMissingVersion > limits.maxWaitingKeys) {
      out.push(
        `consumer ${c.consumer}: ${count(c.keysWaitingOnMissingVersion, 'key waits', 'keys wait')} on a version nothing holds, above --max-waiting-keys ${limits.maxWaitingKeys} ${list}`,
      );
    }
    if (c.parked > limits.maxParked) {
      out.push(`consumer ${c.consumer}: ${count(c.parked, 'parked event')}, above --max-parked ${limits.maxParked} ${list}`);
    }
  }
  return out;
}
