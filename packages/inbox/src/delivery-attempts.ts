/** Bookkeeping entries (here, and early-version keys) kept per process before the oldest are dropped. */
export const MAX_TRACKED = 100_000;

/**
 * Counts a stream message's attempts: its deliveries less those that were
 * only gap waits (`sequential`: naked until its predecessor arrives), which
 * are not failures. Kept per stream sequence, per process; a message acked
 * or parked is forgotten.
 */
export class DeliveryAttempts {
  /** Per stream sequence: when a gap was first seen, and how many deliveries were gap waits (not failures). */
  readonly #tracked = new Map<number, { firstSeenMs: number; gapNaks: number }>();

  /** The attempt a delivery is: `deliveryCount` less the gap waits, at least 1. */
  attempt(seq: number, deliveryCount: number): number {
    const tracked = this.#tracked.get(seq);
    return Math.max(1, deliveryCount - (tracked?.gapNaks ?? 0));
  }

  track(seq: number): { firstSeenMs: number; gapNaks: number } {
    let t = this.#tracked.get(seq);
    if (!t) {
      if (this.#tracked.size >= MAX_TRACKED) {
        const oldest = this.#tracked.keys().next().value;
        if (oldest !== undefined) this.#tracked.delete(oldest);
      }
      t = { firstSeenMs: Date.now(), gapNaks: 0 };
      this.#tracked.set(seq, t);
    }
    return t;
  }

  forget(seq: number): void {
    this.#tracked.delete(seq);
  }
}
