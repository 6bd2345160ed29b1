// The chaos run's options, its fixed shape (lease term, poison and late keys) and its seeded fault
// schedule. Pure: no processes, no I/O, so the schedule of a seed is the same on every machine.

export interface ChaosOptions {
  /** Events to commit. */
  events: number;
  /** Processes (relays and inbox consumers) to SIGKILL and restart. */
  kills: number;
  seed: number;
  /** Concurrent publisher connections. */
  writers: number;
  /** Distinct event keys. */
  keys: number;
  /** Target commit rate, events per second (spreads the faults over time). */
  ratePerSecond: number;
  /** Give up waiting for the drain after this long. */
  drainTimeoutMs: number;
}

/** The relays' lease term: short, so that pauses and cuts longer than it move lanes within the run. */
export const LEASE_TERM_MS = 2000;
/** The stream's duplicate window: shorter than the term and than most pauses, so JetStream hides no stale copy. */
export const DUPLICATE_WINDOW_MS = 1000;

export const POISON_MAX_PAYLOAD = 65_536;
/** Poison keys: the first event of each can never be published; three events wait behind it. */
export const POISON_KEYS = ['poison-unroutable', 'poison-oversized'] as const;
export const POISON_BEHIND = 3;
/**
 * Late-gap keys: each gets LATE_FIRST versions in one transaction at the start, and its version 1
 * fails until LATE_MS after a consumer first saw it, so versions 2.. are stored, wait GAP_TIMEOUT_MS and park (a flush
 * by one consumer while the other parks the key's newer versions, which the writers keep adding);
 * then version 1 arrives late and must go ahead of them (issue 28).
 */
export const LATE_PREFIX = 'late-';
export const LATE_KEYS = 3;
export const LATE_FIRST = 120;
export const LATE_MS = 4_000;
export const GAP_TIMEOUT_MS = 1_500;

export class UsageError extends Error {}

const HELP = `usage: npm run chaos -- --events N --kills K [--seed S] [--writers W] [--keys N] [--rate EVENTS_PER_S] [--drain-timeout-s S]`;

function int(flag: string, value: string | undefined, min: number, max: number): number {
  const n = Number(value);
  if (value === undefined || !Number.isSafeInteger(n) || n < min || n > max) {
    throw new UsageError(`${flag} needs an integer from ${min} to ${max}, got ${JSON.stringify(value)}\n${HELP}`);
  }
  return n;
}

export function parseChaosArgs(argv: readonly string[]): ChaosOptions {
  const flags = new Map<string, string | undefined>();
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] ?? '';
    if (a === '--help' || a === '-h') throw new UsageError(HELP);
    if (!a.startsWith('--')) throw new UsageError(`unexpected argument ${JSON.stringify(a)}\n${HELP}`);
    const [name, inline] = a.split('=', 2) as [string, string | undefined];
    flags.set(name, inline ?? argv[++i]);
  }
  const known = ['--events', '--kills', '--seed', '--writers', '--keys', '--rate', '--drain-timeout-s'];
  for (const name of flags.keys()) if (!known.includes(name)) throw new UsageError(`unknown option ${name}\n${HELP}`);
  if (!flags.has('--events') || !flags.has('--kills')) throw new UsageError(`--events and --kills are required\n${HELP}`);
  const events = int('--events', flags.get('--events'), 1, 10_000_000);
  return {
    events,
    kills: int('--kills', flags.get('--kills'), 0, 1000),
    seed: flags.has('--seed') ? int('--seed', flags.get('--seed'), 0, 2 ** 31 - 1) : Date.now() % 2 ** 31,
    writers: flags.has('--writers') ? int('--writers', flags.get('--writers'), 1, 64) : 4,
    keys: flags.has('--keys') ? int('--keys', flags.get('--keys'), 1, 1_000_000) : 500,
    ratePerSecond: flags.has('--rate') ? int('--rate', flags.get('--rate'), 1, 1_000_000) : Math.max(200, Math.ceil(events / 60)),
    drainTimeoutMs: (flags.has('--drain-timeout-s') ? int('--drain-timeout-s', flags.get('--drain-timeout-s'), 1, 86_400) : 300) * 1000,
  };
}

/** mulberry32: a small seeded PRNG, uniform in [0, 1). */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

export const TARGETS = ['relay-0', 'relay-1', 'consumer-0', 'consumer-1'] as const;
export type Target = (typeof TARGETS)[number];

export type Fault =
  | { kind: 'kill'; atEvent: number; target: Target; downMs: number }
  | { kind: 'nats-restart'; atEvent: number; downMs: number }
  | { kind: 'pg-terminate'; atEvent: number; target: Target }
  /** SIGSTOP, then SIGCONT after `pauseMs` (some longer than the relays' lease term). */
  | { kind: 'pause'; atEvent: number; target: Target; pauseMs: number }
  /** A relay's proxy to PostgreSQL or NATS drops everything for `cutMs`. */
  | { kind: 'partition'; atEvent: number; relay: 0 | 1; from: 'pg' | 'nats'; cutMs: number }
  /** A relay's lease connection alone is terminated while the relay goes on running (issue 41). */
  | { kind: 'lease-kill'; atEvent: number; relay: 0 | 1 };

/**
 * The faults of a run, by the committed-event count at which each fires
 * (between 5 % and 95 % of the load): `kills` SIGKILLs of random processes,
 * one nats-server stop and restart, ceil(kills / 2) (at least 2)
 * terminations of a process's PostgreSQL backends, as many SIGSTOP pauses
 * of 0.5-5 s (the relays' lease term is 2 s), one cut of a relay from
 * PostgreSQL and one from NATS, 1-5 s each, and as many terminations of a
 * relay's lease connection alone.
 */
export function faultSchedule(options: Pick<ChaosOptions, 'events' | 'kills' | 'seed'>): Fault[] {
  const rnd = seededRandom(options.seed);
  const at = () => Math.floor(options.events * (0.05 + 0.9 * rnd()));
  const target = () => TARGETS[Math.floor(rnd() * TARGETS.length)] as Target;
  const faults: Fault[] = [];
  for (let i = 0; i < options.kills; i++)
    faults.push({ kind: 'kill', atEvent: at(), target: target(), downMs: 200 + Math.floor(rnd() * 1300) });
  faults.push({ kind: 'nats-restart', atEvent: at(), downMs: 1000 + Math.floor(rnd() * 2000) });
  const terminations = Math.max(2, Math.ceil(options.kills / 2));
  for (let i = 0; i < terminations; i++) faults.push({ kind: 'pg-terminate', atEvent: at(), target: target() });
  // Drawn after the others, so a seed's kills, restart and terminations stay where they were.
  const pauses = Math.max(2, Math.ceil(options.kills / 2));
  for (let i = 0; i < pauses; i++) faults.push({ kind: 'pause', atEvent: at(), target: target(), pauseMs: 500 + Math.floor(rnd() * 4500) });
  for (const from of ['pg', 'nats'] as const) {
    faults.push({ kind: 'partition', atEvent: at(), relay: rnd() < 0.5 ? 0 : 1, from, cutMs: 1000 + Math.floor(rnd() * 4000) });
  }
  for (let i = 0; i < pauses; i++) faults.push({ kind: 'lease-kill', atEvent: at(), relay: rnd() < 0.5 ? 0 : 1 });
  return faults.sort((a, b) => a.atEvent - b.atEvent);
}
