import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { FERRY_RELEASE, type Queryable } from '@ferry/core';
import type { Logger } from './types.js';

/** A heartbeat's row lives for this many intervals past its last renewal: one missed beat is not a death. */
export const HEARTBEAT_TERMS = 3;

export interface HeartbeatOptions {
  /** Bounded queries on the inbox's pool (ownQueries). */
  db: Queryable;
  /** The quoted schema. */
  s: string;
  consumer: string;
  stream: string;
  mode: string;
  intervalMs: number;
  logger: Logger;
}

/**
 * The inbox's row in `inbox_instances` (inbox migration 000008), as a relay
 * keeps its row in `relay_instances`: written on start, renewed every
 * `heartbeatIntervalMs`, deleted on a clean stop, so `ferry status` and the
 * console list every running inbox with its consumer, release and last beat.
 * A beat that fails is logged once (and its recovery), never thrown: the
 * heartbeat is for the operator's view and must not stop consuming.
 */
export class Heartbeat {
  /** This inbox's id in `inbox_instances`: 8 hex, as a relay's instance id. */
  readonly instance = randomBytes(4).toString('hex');
  readonly #o: HeartbeatOptions;
  #timer: NodeJS.Timeout | undefined;
  #beating: Promise<void> | undefined;
  #failing = false;

  constructor(options: HeartbeatOptions) {
    this.#o = options;
  }

  /** Writes the row now and renews it on a timer. */
  async start(): Promise<void> {
    await this.#beat();
    this.#timer = setInterval(() => {
      // One beat at a time: a slow database skips a tick rather than piling statements up.
      this.#beating ??= this.#beat().finally(() => {
        this.#beating = undefined;
      });
    }, this.#o.intervalMs);
    this.#timer.unref();
  }

  /** Stops renewing and deletes the row (a clean stop: the inbox is gone, not stale). */
  async stop(): Promise<void> {
    clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#beating;
    await this.#o.db.query(`DELETE FROM ${this.#o.s}.inbox_instances WHERE instance = $1`, [this.instance]);
  }

  async #beat(): Promise<void> {
    const o = this.#o;
    const termMs = HEARTBEAT_TERMS * o.intervalMs;
    try {
      await o.db.query(
        `INSERT INTO ${o.s}.inbox_instances AS i (instance, consumer, stream, mode, release, host, pid, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, now() + $8::integer * interval '1 millisecond')
         ON CONFLICT (instance) DO UPDATE SET seen_at = now(), expires_at = excluded.expires_at`,
        [this.instance, o.consumer, o.stream, o.mode, FERRY_RELEASE, hostname(), process.pid, termMs],
      );
      // Rows of this consumer's inboxes that stopped beating a day ago (killed, never stopped cleanly).
      await o.db.query(`DELETE FROM ${o.s}.inbox_instances WHERE consumer = $1 AND expires_at < now() - interval '1 day'`, [o.consumer]);
      if (this.#failing) o.logger.info({ instance: this.instance }, 'inbox heartbeat written again');
      this.#failing = false;
    } catch (err) {
      if (!this.#failing) {
        o.logger.warn(
          { err, instance: this.instance },
          `inbox heartbeat failed: ferry status shows this inbox as stale after ${termMs} ms (is inbox migration 8 applied? ferry migrate --inbox)`,
        );
      }
      this.#failing = true;
    }
  }
}
