/**
 * Commit-to-arrival latency of events by id: the producer reports when a
 * transaction's COMMIT returned, the subscriber when a message arrived;
 * either may come first (a message that arrives before its COMMIT callback
 * ran counts as 0 ms). One clock: both sides run in this process.
 */
export class LatencyClock {
  readonly latencies: number[] = [];
  /** Messages arrived, measured or not. */
  received = 0;
  #committedAt = new Map<string, number>();
  #arrivedAt = new Map<string, number>();

  /** A message carrying event `id` arrived now. */
  arrived(id: string): void {
    const now = performance.now();
    this.received++;
    const at = this.#committedAt.get(id);
    if (at === undefined) this.#arrivedAt.set(id, now);
    else {
      this.latencies.push(now - at);
      this.#committedAt.delete(id);
    }
  }

  /** The transaction holding these events committed now; during a warm-up (`measure` false) nothing is recorded. */
  committed(ids: Iterable<string>, measure: boolean): void {
    if (!measure) return;
    const now = performance.now();
    for (const id of ids) {
      if (this.#arrivedAt.delete(id)) this.latencies.push(0);
      else this.#committedAt.set(id, now);
    }
  }

  /** The latencies, sorted ascending. */
  sorted(): number[] {
    return [...this.latencies].sort((a, b) => a - b);
  }
}
