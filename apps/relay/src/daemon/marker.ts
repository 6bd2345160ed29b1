/**
 * Marks acknowledged rows published for every chain of a relay instance, in
 * as few statements as load allows: one flush at a time, each taking every
 * row acknowledged since the previous one (a few milliseconds after the first
 * when idle). A chain awaits its rows' marks before its key can be claimed
 * again; a row is never marked before its PubAck.
 */
export class Marker<T = string> {
  readonly #flush: (items: T[]) => Promise<void>;
  readonly #delayMs: number;
  #next: { seqs: T[]; done: Promise<void>; resolve: () => void } | undefined;
  #flushing: Promise<void> | undefined;
  #timer: NodeJS.Timeout | undefined;

  /** `flush` must not throw (it logs and gives up: an unmarked row is sent again, and JetStream drops the copy). */
  constructor(flush: (items: T[]) => Promise<void>, delayMs = 5) {
    this.#flush = flush;
    this.#delayMs = delayMs;
  }

  /** Resolves once `seqs` were marked (or the attempt to mark them gave up). */
  mark(seqs: readonly T[]): Promise<void> {
    if (seqs.length === 0) return Promise.resolve();
    if (!this.#next) {
      let resolve = () => {};
      const done = new Promise<void>((r) => {
        resolve = r;
      });
      this.#next = { seqs: [], done, resolve };
    }
    this.#next.seqs.push(...seqs);
    if (!this.#flushing && !this.#timer) {
      this.#timer = setTimeout(() => {
        this.#timer = undefined;
        this.#flushNext();
      }, this.#delayMs);
    }
    return this.#next.done;
  }

  #flushNext(): void {
    const batch = this.#next;
    if (!batch || this.#flushing) return;
    this.#next = undefined;
    this.#flushing = this.#flush(batch.seqs).finally(() => {
      batch.resolve();
      this.#flushing = undefined;
      // Rows acknowledged during the flush go out at once, in one statement.
      this.#flushNext();
    });
  }

  /** Flushes now and waits until nothing is left to mark. */
  async drain(): Promise<void> {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    while (this.#next || this.#flushing) {
      this.#flushNext();
      await this.#flushing;
    }
  }
}
