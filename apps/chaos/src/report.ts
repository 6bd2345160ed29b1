// What the chaos run prints at its end (one job): the table of what it found and what it did, on stdout.
import type { FaultCounts } from './faults.js';
import { DUPLICATE_WINDOW_MS, GAP_TIMEOUT_MS, LATE_KEYS, LEASE_TERM_MS, POISON_BEHIND, POISON_KEYS } from './plan.js';
import type { Verdict } from './verdict.js';

export interface RunFacts {
  faults: FaultCounts;
  /** Processes that exited without a fault (each restarted). */
  unexpectedExits: number;
  totalMs: number;
  seed: number;
}

/** The closing table: one row a measure, its value, and `ok`, `VIOLATION` or what the number means. */
export function printReport(v: Verdict, run: RunFacts): void {
  const f = run.faults;
  const rows: Array<[string, string, string]> = [
    ['events committed', String(v.committed), ''],
    [
      'messages in the stream',
      String(v.inStream),
      `${v.inStream - v.streamDistinct} copies stored again (takeover re-sends outside the ${DUPLICATE_WINDOW_MS} ms duplicate window)`,
    ],
    ['stale copies', String(v.staleCopies), v.staleCopies === 0 ? 'ok (none stored after its row was marked)' : 'VIOLATION'],
    ['distinct events in the stream', String(v.streamDistinct), v.streamDistinct === v.committed ? 'ok' : 'VIOLATION'],
    [
      'effects applied',
      String(v.applied),
      v.applied === v.committed && v.appliedTwice === 0 ? 'ok (= committed, none twice)' : 'VIOLATION',
    ],
    [
      'per-key order violations',
      String(v.orderViolations + v.streamOrderViolations),
      v.orderViolations + v.streamOrderViolations === 0 ? 'ok' : 'VIOLATION',
    ],
    [
      'poison keys held at their first event',
      `${POISON_KEYS.length} x ${1 + POISON_BEHIND}`,
      v.poisonHeld && v.poisonInStream === 0 ? 'ok (unroutable backing off, oversized dead, nothing sent behind them)' : 'VIOLATION',
    ],
    ['messages the relays published', String(v.published), 'seen by a core subscription (a lower bound)'],
    ['duplicates dropped by the stream', String(v.resent), 'at least: re-sends of an id the tap saw before'],
    ['duplicates dropped by the inbox', String(v.inboxDropped), 'duplicate + stale reports'],
    ['inbox gap waits', String(v.gaps), 'sequential mode: early versions stored to wait'],
    [
      'events parked, left parked',
      `${v.parked}, ${v.leftParked}`,
      v.leftParked === 0 && v.lateParked >= LATE_KEYS * 2
        ? `ok (${v.lateParked} of the late keys; gap timeout ${GAP_TIMEOUT_MS} ms)`
        : 'VIOLATION',
    ],
    ['time to drain', `${(v.drainMs / 1000).toFixed(1)} s`, 'after the last commit'],
    ['processes SIGKILLed and restarted', String(f.kills), ''],
    ['nats-server stops and restarts', String(f.natsRestarts), ''],
    ['PostgreSQL backends terminated', String(f.backendsTerminated), ''],
    ['processes paused (SIGSTOP)', String(f.pauses), `${f.pausesOverTerm} longer than the lease term (${LEASE_TERM_MS} ms)`],
    ['relays cut off (PostgreSQL or NATS)', String(f.partitions), 'blackhole, then half-open (PostgreSQL) or healed (NATS)'],
    ['relay lease connections terminated', String(f.leaseKills), 'the relay itself goes on running'],
    ['processes that exited on their own', String(run.unexpectedExits), 'restarted'],
    ['total time', `${(run.totalMs / 1000).toFixed(1)} s`, `seed ${run.seed}`],
  ];
  const w0 = Math.max(...rows.map((r) => r[0].length));
  const w1 = Math.max(...rows.map((r) => r[1].length));
  process.stdout.write(`\n${rows.map(([a, b, c]) => `${a.padEnd(w0)}  ${b.padStart(w1)}  ${c}`.trimEnd()).join('\n')}\n\n`);
}
