import { namedStatement, SQLSTATE, sqlState } from '@ferry/core';
import type pg from 'pg';
import { forgetWaitingSql, startWaitingSql, stopWaitingSql } from '../sql/relay-waiting.js';
import type { Logger } from '../types.js';

type Statement = { name: string; text: string };

/**
 * How long a wait record holds without renewal: at least 10 s, and three poll
 * intervals, so an idle relay (which polls at least once per interval)
 * renews it in time. One that died stops being waited for (its publishers
 * stop sending NOTIFY) within this time.
 */
export function waitRecordMs(pollIntervalMs: number): number {
  return Math.max(10_000, 3 * pollIntervalMs);
}

/**
 * This relay instance's row in `relay_waiting` (outbox migration 000007): set
 * while its polls find nothing and its LISTEN connection is up, so the
 * publish functions NOTIFY at commit and it is woken at once; cleared when it
 * finds rows, so publishers of a busy relay (which polls again within
 * milliseconds) pay no NOTIFY. One statement at a time, in order; a failure
 * is only a lost hint (the relay polls anyway), logged at debug.
 */
export class WaitRecord {
  readonly #pool: pg.Pool;
  readonly #instance: string;
  // Named (prepared once per pool connection): at 1,000 events/s a relay that keeps catching up writes its record
  // tens of times a second, and each unnamed statement was parsed and planned again.
  readonly #sql: { start: Statement; stop: Statement; forget: Statement };
  readonly #logger: Logger;
  readonly #holdMs: number;
  /** When the current record was written (0: none current). */
  #since = 0;
  #queue: Promise<void> = Promise.resolve();
  #unsupported = false;

  constructor(pool: pg.Pool, schemaSql: string, instance: string, pollIntervalMs: number, logger: Logger) {
    this.#pool = pool;
    this.#holdMs = waitRecordMs(pollIntervalMs);
    this.#instance = instance;
    this.#sql = {
      start: namedStatement('wait_start', startWaitingSql(schemaSql)),
      stop: namedStatement('wait_stop', stopWaitingSql(schemaSql)),
      forget: namedStatement('wait_forget', forgetWaitingSql(schemaSql)),
    };
    this.#logger = logger;
  }

  /**
   * Polls found nothing: record (or renew) the wait. Resolves once written,
   * `true` when the record is new: a transaction that ran its publish before
   * the record existed sent no NOTIFY, so the caller polls again soon to find
   * it (it may commit just after the record).
   */
  async idle(): Promise<boolean> {
    const now = Date.now();
    if (this.#unsupported || now - this.#since < this.#holdMs / 2) return false;
    const fresh = this.#since === 0;
    this.#since = now;
    await this.#run(this.#sql.start, [this.#instance, this.#holdMs]);
    // A failed write resets #since: nothing new was recorded, so no quick re-poll (else every poll would be 5 ms apart while it fails).
    return fresh && this.#since !== 0;
  }

  /** Rows were found (or the LISTEN connection is down): publishers stop notifying. Not awaited by the loop. */
  busy(): void {
    if (this.#since === 0) return;
    this.#since = 0;
    void this.#run(this.#sql.stop, [this.#instance]);
  }

  /** On stop. */
  forget(): Promise<void> {
    if (this.#unsupported) return this.#queue;
    this.#since = 0;
    return this.#run(this.#sql.forget, [this.#instance]);
  }

  #run(statement: Statement, values: unknown[]): Promise<void> {
    this.#queue = this.#queue.then(async () => {
      try {
        await this.#pool.query({ ...statement, values });
      } catch (err) {
        this.#since = 0;
        const state = sqlState(err);
        if (state === SQLSTATE.undefinedTable || state === SQLSTATE.insufficientPrivilege) {
          // Not transient: stop asking (each refusal is an ERROR in the server's log) and say the fix once.
          this.#unsupported = true;
          this.#logger.warn(
            { event: 'wait-record-unsupported', err },
            state === SQLSTATE.undefinedTable
              ? 'the outbox has no relay_waiting table (a schema before outbox migration 000007): publishers cannot wake this relay with NOTIFY, it polls; run `ferry migrate`'
              : "this relay's role may not write relay_waiting: publishers cannot wake it with NOTIFY, it polls; apply what `ferry migrate --print-grants --role <role> --for relay` prints",
          );
        } else {
          this.#logger.debug({ err }, 'recording the wait for NOTIFY failed; polling covers it');
        }
      }
    });
    return this.#queue;
  }
}
