/**
 * The running flag and the promise of a component's loop that works until stopped (the
 * `Dispatcher`, the `Notifier`): `start(run)` starts it once, the loop checks `running` between
 * rounds, and `stop(interrupt)` clears the flag, interrupts whatever the loop waits on, and waits
 * for the loop to end.
 */
export class RunLoop {
  #running = false;
  #done: Promise<void> | undefined;

  get running(): boolean {
    return this.#running;
  }

  /** Starts `run` unless the loop runs already. */
  start(run: () => Promise<void>): void {
    if (this.#running) return;
    this.#running = true;
    this.#done = run();
  }

  /** Clears `running`, calls `interrupt` (to end the loop's wait: a sleep, a connection), and waits for the loop to end. */
  async stop(interrupt: () => void | Promise<void>): Promise<void> {
    this.#running = false;
    await interrupt();
    await this.#done;
  }
}
