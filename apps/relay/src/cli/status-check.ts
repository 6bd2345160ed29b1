import type { StatusReport } from '../commands/status.js';
import { count } from '../count.js';

/**
 * What in a status needs a person, one phrase each (empty: nothing): what
 * `ferry status --check` exits 1 on. Dead events and blocked keys hold their
 * keys' later events; a lane with pending events and no live owner ships
 * nothing until a relay takes it; a relay below the schema's relay floor is an
 * old release left running after an upgrade.
 */
export function statusAttention(
  r: Pick<StatusReport, 'dead' | 'blockedKeys' | 'unownedLanesWithBacklog' | 'instances' | 'relaysBeforeLeases'>,
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
  return out;
}
