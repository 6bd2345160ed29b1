// How a lane taken is told (one job): the rule that made it takeable and the log line of the take,
// written by the leaser (lane-leaser.ts) for every lane a take statement returns.
import { LEASE_FENCE_FRACTION } from '../sql/leases.js';
import type { Logger } from '../types.js';

/** What made a lane takeable: released or never held, its term ran out, or its owner's connection or heartbeat went and its fence passed. */
export const TAKEOVER_RULES = ['free', 'term', 'connection'] as const;
export type TakeoverRule = (typeof TAKEOVER_RULES)[number];

const RULE_TEXT: ReadonlyMap<string, string> = new Map([
  ['free', 'which had released it'],
  ['term', 'whose term ran out'],
  [
    'connection',
    `whose lease connection or heartbeat is gone and whose fence (${LEASE_FENCE_FRACTION} of the term after its last renewal) has passed`,
  ],
]);

/** One row of the take statement: the lane, its new epoch, its previous owner (null: never held) and the rule. */
export interface TakenLease {
  lane: number;
  epoch: string;
  prev: string | null;
  rule: TakeoverRule;
}

/** Logs `lease-taken` for a lane `instance` took, naming whom from and why when it had an owner. */
export function logLeaseTaken(logger: Logger, r: TakenLease, instance: string): void {
  logger.info(
    { event: 'lease-taken', lane: r.lane, epoch: r.epoch, from: r.prev, ...(r.prev === null ? {} : { rule: r.rule }) },
    r.prev === null
      ? `lease taken: lane ${r.lane} epoch ${r.epoch}`
      : `lease taken: lane ${r.lane} epoch ${r.epoch} from ${r.prev === instance ? 'this instance' : r.prev}, ${RULE_TEXT.get(r.rule) ?? r.rule}`,
  );
}
