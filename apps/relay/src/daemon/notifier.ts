import { setTimeout as sleep } from 'node:timers/promises';
import { backoffDelayMs } from '@ferry/core';
import pg from 'pg';
import type { Logger } from '../types.js';
import { RunLoop } from './run-loop.js';

export interface NotifierOptions {
  databaseUrl: string;
  applicationName: string;
  channel: string;
  logger: Logger;
  /** Called on every notification and after every (re)connect. */
  onWake: () => void;
}

/**
 * LISTENs on the publisher's NOTIFY channel on a client of its own. It is
 * only a latency hint (the dispatcher polls anyway): when the connection
 * breaks it reconnects with jittered exponential backoff, and a reconnect
 * wakes the dispatcher because notifications sent meanwhile are lost.
 */
export class Notifier {
  readonly #o: NotifierOptions;
  #client: pg.Client | undefined;
  readonly #loop = new RunLoop();
  #broken: (() => void) | undefined;
  #stopped: (() => void) | undefined;

  constructor(options: NotifierOptions) {
    this.#o = options;
  }

  get connected(): boolean {
    return this.#client !== undefined;
  }

  start(): void {
    this.#loop.start(() => this.#run());
  }

  async stop(): Promise<void> {
    await this.#loop.stop(async () => {
      this.#stopped?.();
      this.#broken?.();
      const client = this.#client;
      this.#client = undefined;
      if (client) await client.end().catch(() => {});
    });
  }

  async #run(): Promise<void> {
    let failures = 0;
    while (this.#loop.running) {
      const client = new pg.Client({
        connectionString: this.#o.databaseUrl,
        application_name: `${this.#o.applicationName}:listen`,
        keepAlive: true,
      });
      const broken = new Promise<void>((resolve) => {
        this.#broken = resolve;
        client.on('error', () => resolve());
        client.on('end', () => resolve());
      });
      try {
        await client.connect();
        client.on('notification', () => this.#o.onWake());
        await client.query(`LISTEN ${client.escapeIdentifier(this.#o.channel)}`);
        this.#client = client;
        if (failures > 0) this.#o.logger.info({ event: 'listen-restored' }, 'LISTEN connection restored');
        failures = 0;
        this.#o.onWake();
        await broken;
        if (this.#loop.running) this.#o.logger.warn({ event: 'listen-lost' }, 'LISTEN connection lost: polling only until it is back');
      } catch (err) {
        if (failures === 0 && this.#loop.running)
          this.#o.logger.warn({ err, event: 'listen-lost' }, 'LISTEN connection failed: polling only until it is back');
      }
      this.#client = undefined;
      client.on('error', () => {});
      await client.end().catch(() => {});
      if (!this.#loop.running) break;
      failures++;
      const delay = backoffDelayMs(failures + 1, 250, 30_000);
      await Promise.race([sleep(delay), new Promise<void>((resolve) => (this.#stopped = resolve))]);
    }
  }
}
