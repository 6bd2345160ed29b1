/**
 * Runs tasks serially per key and concurrently across keys, at most
 * `concurrency` at once. The in-process half of "per key serial": across
 * processes the `(consumer, key)` row lock does the same job.
 */
export class KeyScheduler {
  readonly #concurrency: number;
  readonly #queues = new Map<string, Array<() => Promise<void>>>();
  /** Keys with queued work and no running task, oldest first. */
  readonly #ready: string[] = [];
  #running = 0;
  #pending = 0;
  #idleWaiters: Array<() => void> = [];
  readonly #onError: (err: unknown) => void;

  constructor(concurrency: number, onError: (err: unknown) => void) {
    this.#concurrency = concurrency;
    this.#onError = onError;
  }

  /** Tasks queued or running. */
  get size(): number {
    return this.#pending;
  }

  push(key: string, task: () => Promise<void>): void {
    this.#pending++;
    const queue = this.#queues.get(key);
    if (queue) {
      queue.push(task);
      return;
    }
    this.#queues.set(key, [task]);
    this.#ready.push(key);
    this.#pump();
  }

  /** Resolves once nothing is queued or running. */
  idle(): Promise<void> {
    if (this.#pending === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  #pump(): void {
    while (this.#running < this.#concurrency && this.#ready.length > 0) {
      const key = this.#ready.shift() as string;
      const task = this.#queues.get(key)?.[0];
      if (!task) continue;
      this.#running++;
      void this.#run(key, task);
    }
  }

  async #run(key: string, task: () => Promise<void>): Promise<void> {
    try {
      await task();
    } catch (err) {
      this.#onError(err);
    }
    this.#running--;
    this.#pending--;
    const queue = this.#queues.get(key);
    queue?.shift();
    if (queue && queue.length > 0) this.#ready.push(key);
    else this.#queues.delete(key);
    if (this.#pending === 0) {
      const waiters = this.#idleWaiters;
      this.#idleWaiters = [];
      for (const w of waiters) w();
    }
    this.#pump();
  }
}
