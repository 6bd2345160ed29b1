/** The longest wait between two retries of a parked event: a key resumes within this of its dependency's return. */
export const PARK_RETRY_DELAY_MAX_MS = 60_000;

/** pg-boss's retry settings of a parked event, given on every job the inbox parks (and as its queue's defaults). */
export interface ParkRetryPolicy {
  readonly retryLimit: number;
  /** Seconds, as pg-boss counts them. */
  readonly retryDelay: number;
  readonly retryBackoff: true;
  /** Seconds. */
  readonly retryDelayMax: number;
}

/**
 * How often pg-boss retries a parked event before the job is `failed` (and
 * holds its key): enough retries that their waits add up to `retrySpanMs` at
 * the least, and never fewer than `parkRetryLimit` (issue 43: a count alone
 * gave an event parked behind another, never tried from the stream,
 * `parkRetryLimit` + 1 tries within seconds, and a handler whose dependency
 * restarted failed 19 of 20 healthy keys for good).
 *
 * pg-boss waits `retryDelay × 2^n × (1 + random)` seconds after the n-th
 * failure (n from 0), capped at `retryDelayMax`; the sum is taken over the
 * low end, so the span is a floor: the doubling part may take up to twice as
 * long, the capped part takes exactly its cap. Measured by pg-boss's clock
 * from the first try in the parking lot.
 *
 * @example
 * parkRetryPolicy({ retrySpanMs: 900_000, parkRetryLimit: 3, parkRetryDelayMs: 1_000 });
 * // → { retryLimit: 20, retryDelay: 1, retryBackoff: true, retryDelayMax: 60 }: 1, 2, 4, … 32, then 60 s waits
 */
export function parkRetryPolicy(o: { retrySpanMs: number; parkRetryLimit: number; parkRetryDelayMs: number }): ParkRetryPolicy {
  const delay = Math.ceil(o.parkRetryDelayMs / 1000);
  const max = Math.max(delay, PARK_RETRY_DELAY_MAX_MS / 1000);
  let retries = 0;
  let waitedS = 0;
  // pg-boss's doubling stops at 2^15 (`2 ^ LEAST(16, retry_count + 1) / 2`); the cap is reached long before.
  while (waitedS * 1000 < o.retrySpanMs) {
    waitedS += Math.min(max, delay * 2 ** Math.min(15, retries));
    retries++;
  }
  return { retryLimit: Math.max(o.parkRetryLimit, retries), retryDelay: delay, retryBackoff: true, retryDelayMax: max };
}
