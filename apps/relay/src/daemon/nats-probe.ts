import type { NatsConnection } from '@nats-io/transport-node';

/**
 * Pings NATS on a timer (a round trip: a connection that only looks open does not count) and
 * remembers when the last ping that came back was sent. The relay gives its lanes up while that is
 * older than its lease term less the margin, so an instance that can reach NATS takes them.
 */
export class NatsProbe {
  readonly #nc: NatsConnection;
  readonly #everyMs: number;
  #okAt = performance.now();
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;

  constructor(nc: NatsConnection, everyMs: number) {
    this.#nc = nc;
    this.#everyMs = Math.max(100, everyMs);
  }

  /** Milliseconds since the last ping that came back was sent. */
  sinceOkMs(): number {
    return performance.now() - this.#okAt;
  }

  start(): void {
    this.#okAt = performance.now();
    this.#timer = setTimeout(() => void this.#probe(), this.#everyMs);
  }

  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
  }

  async #probe(): Promise<void> {
    if (this.#stopped || this.#nc.isClosed()) return;
    const started = performance.now();
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), this.#everyMs);
    });
    const outcome = await Promise.race([
      this.#nc.flush().then(
        () => 'ok' as const,
        () => 'late' as const,
      ),
      late,
    ]);
    clearTimeout(timer);
    if (outcome === 'ok') this.#okAt = started;
    if (!this.#stopped) this.#timer = setTimeout(() => void this.#probe(), this.#everyMs);
  }
}

/** Drains the connection, bounded: with NATS down, drain() would wait for the server forever. */
export async function drainNats(nc: NatsConnection | undefined): Promise<void> {
  if (!nc || nc.isClosed()) return;
  // drain() waits for the server; with NATS down it would wait forever, so it gets a bound.
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, 5000);
  });
  await Promise.race([nc.drain().catch(() => {}), bound]);
  clearTimeout(timer);
  if (!nc.isClosed()) await nc.close().catch(() => {});
}
