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
 * How long a relay's polls must keep finding work, with no empty poll
 * between, before its wait record is cleared. A relay that catches up
 * between commits (1,000 events/s in transactions of 5 is a commit every
 * 5 ms) flips between busy and idle hundreds of times a second: clearing
 * and writing the record on each flip left its row with thousands of dead
 * tuples (the 30-minute soak: 1,910 dead for 1 live), and each clear made
 * the publishes that ran meanwhile skip their NOTIFY, so a transaction that
 * committed after the relay's next empty poll waited for its back-off (p99
 * 146 ms at 1,000 events/s, 13.6 ms with `notify: true`). Kept through the
 * flips, the record costs a NOTIFY per commit only while the relay keeps
 * up; a relay with a backlog polls back to back and clears it.
 */
export const WAIT_KEPT_WHILE_BUSY_MS = 250;

/**
 * This relay instance's row in `relay_waiting` (outbox migration 000007): set
 * while its polls find nothing and its LISTEN connection is up, so the
 * publish functions NOTIFY at commit and it is woken at once; cleared once
 * its polls have found work for `WAIT_KEPT_WHILE_BUSY_MS` on end, so
 * publishers of a relay with a backlog (which polls back to back) pay no
 * NOTIFY. One statement at a time, in order; a failure is only a lost hint
 * (the relay polls anyway), logged at debug.
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
  /** When the polls started finding work with no empty poll since (undefined: the last poll was empty). */
  #busySince: number | undefined;
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
    this.#busySince = undefined;
    const now = Date.now();
    if (this.#unsupported || now - this.#since < this.#holdMs / 2) return false;
    const fresh = this.#since === 0;
    this.#since = now;
    await this.#run(this.#sql.start, [this.#instance, this.#holdMs]);
    // A failed write resets #since: nothing new was recorded, so no quick re-poll (else every poll would be 5 ms apart while it fails).
    return fresh && this.#since !== 0;
  }

  /**
   * A poll found rows, or rows are in flight: once that has lasted
   * `WAIT_KEPT_WHILE_BUSY_MS` with no empty poll, publishers stop notifying.
   * `atOnce`: nothing would be claimed on a wake-up (no lanes, NATS down, the
   * circuit open) or no NOTIFY could arrive (the LISTEN connection is down).
   * Not awaited by the loop.
   */
  busy(atOnce = false): void {
    if (this.#since === 0) return;
    if (!atOnce) {
      const now = performance.now();
      this.#busySince ??= now;
      if (now - this.#busySince < WAIT_KEPT_WHILE_BUSY_MS) return;
    }
    this.#since = 0;
    this.#busySince = undefined;
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
