/**
 * Ferry's one backoff formula: an exponential cap, `baseMs · 2^(attempt-1)`
 * bounded by `maxMs`, and full jitter over it (a uniform delay in
 * `[0, cap)`), so retries of many keys that failed together spread out
 * instead of coming back together (the relay's row retries, its reconnects).
 *
 * The inbox's `backoffMs` is a table the user writes ("about 1 s, then 5 s"),
 * not a cap: a full-jitter delay from it could be 0 and redeliver at once, so
 * it takes {@link equalJitterMs} of the table's entry, which keeps half the
 * delay fixed (`[cap/2, cap]`, what test/inbox-park.test.ts checks).
 */

/** The exponential cap of attempt `attempt` (1 for the first retry): `min(maxMs, baseMs · 2^(attempt-1))`. */
export function exponentialCapMs(attempt: number, baseMs: number, maxMs: number): number {
  return Math.min(maxMs, baseMs * 2 ** Math.min(Math.max(attempt - 1, 0), 40));
}

/** Full jitter: a whole number of milliseconds, uniform in `[0, capMs)`. */
export function fullJitterMs(capMs: number, random: () => number = Math.random): number {
  return Math.floor(random() * capMs);
}

/** Equal jitter: half of `capMs` fixed, the other half uniform, rounded: `[capMs/2, capMs]`. */
export function equalJitterMs(capMs: number, random: () => number = Math.random): number {
  return Math.round(capMs / 2 + (random() * capMs) / 2);
}

/**
 * Full-jitter exponential backoff: a uniform delay in `[0, min(maxMs, baseMs · 2^(attempt-1)))`.
 *
 * @example
 * backoffDelayMs(3, 500, 60_000); // somewhere in [0, 2000)
 */
export function backoffDelayMs(attempt: number, baseMs: number, maxMs: number, random: () => number = Math.random): number {
  return fullJitterMs(exponentialCapMs(attempt, baseMs, maxMs), random);
}
