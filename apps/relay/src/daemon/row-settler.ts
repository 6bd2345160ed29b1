import { backoffDelayMs, namedStatement } from '@ferry/core';
import { ExponentialBackoff, fullJitterGenerator, handleAll, retry } from 'cockatiel';
import type pg from 'pg';
import type { Classified } from '../errors.js';
import { markFailedSql } from '../sql/mark-failed.js';
import { markPublishedSql } from '../sql/mark-published.js';
import type { CompiledRelayOptions, Logger } from '../types.js';
import type { Acked, LeasedRow } from './claim-plan.js';
import { failureText } from './failure-text.js';
import { Marker } from './marker.js';
import type { RelayMetrics } from './metrics.js';
import type { RelayEmitter } from './relay-emitter.js';

/** A statement's retries: 5 attempts, full-jitter exponential backoff from 50 ms, capped at 2 s. */
const STATEMENT_RETRY = retry(handleAll, {
  maxAttempts: 4,
  backoff: new ExponentialBackoff({ generator: fullJitterGenerator, initialDelay: 50, maxDelay: 2000 }),
});

/** Tries a statement a few times (a terminated pool connection is replaced by the next attempt). */
function withRetries<T>(what: string, logger: Logger, fn: () => Promise<T>): Promise<T> {
  return STATEMENT_RETRY.execute(async ({ attempt }) => {
    try {
      return await fn();
    } catch (err) {
      logger.debug({ err, attempt: attempt + 1 }, `${what} failed, retrying`);
      throw err;
    }
  });
}

/** 1, 2, 4, 8, …: the attempts at which a backing-off head is logged. */
function isPowerOfTwo(n: number): boolean {
  return n > 0 && (n & (n - 1)) === 0;
}

/** Integers (numbers, or text as PostgreSQL prints a bigint) as a PostgreSQL array literal, e.g. `{1,2,3}`. */
function integerArray(values: ReadonlyArray<string | number>): string {
  return `{${values.join(',')}}`;
}

export interface RowSettlerDeps {
  options: CompiledRelayOptions;
  schemaSql: string;
  pool: pg.Pool;
  metrics: RelayMetrics;
  events: RelayEmitter;
  logger: Logger;
  /** This instance's id: the owner name in its lease rows, which every mark names. */
  instance: string;
}

/**
 * Settles what the chains sent: acknowledged rows marked published in
 * batches (`Marker`), failed rows recorded with their backoff or as dead.
 * Both statements carry each row's lease epoch, so a holder that lost the
 * lane changes nothing.
 */
export class RowSettler {
  readonly #d: RowSettlerDeps;
  readonly #markPublishedSql: { name: string; text: string };
  readonly #markFailedSql: string;
  readonly #marker: Marker<Acked>;

  constructor(deps: RowSettlerDeps) {
    this.#d = deps;
    this.#markPublishedSql = namedStatement('mark', markPublishedSql(deps.schemaSql));
    this.#markFailedSql = markFailedSql(deps.schemaSql);
    this.#marker = new Marker<Acked>((rows) => this.#markPublished(rows));
  }

  /** Resolves once the rows were marked (or the attempt gave up: they are sent again, and JetStream drops the copy). */
  mark(acked: readonly Acked[]): Promise<void> {
    return this.#marker.mark(acked);
  }

  /** Marks what is left to mark. */
  drain(): Promise<void> {
    return this.#marker.drain();
  }

  /** The Marker's flush: one statement for every row acknowledged since the previous flush. */
  async #markPublished(acked: Acked[]): Promise<void> {
    const { pool, logger, metrics, events, instance } = this.#d;
    const started = performance.now();
    const seqs = acked.map((a) => a.seq);
    // Array literals built with one join each: seqs, epochs and lanes are integers (as PostgreSQL
    // printed them), which need no quoting, where node-postgres quotes and escapes every element.
    const values = [integerArray(seqs), integerArray(acked.map((a) => a.epoch)), instance, integerArray(acked.map((a) => a.lane))];
    try {
      const r = await withRetries('marking published', logger, () => pool.query({ ...this.#markPublishedSql, values }));
      const fenced = seqs.length - (r.rowCount ?? 0);
      if (fenced > 0) logger.debug({ fenced }, 'acknowledged rows of lanes lost meanwhile were left for their new holder');
      metrics.published.inc(seqs.length);
      events.emit('relay:batch:published', {
        rows: seqs.length,
        published: seqs.length,
        failed: 0,
        durationMs: performance.now() - started,
      });
    } catch (err) {
      logger.error(
        { err, rows: seqs.length },
        'could not mark acknowledged rows published; they will be sent again and JetStream will drop the duplicates',
      );
    }
  }

  /** A chain's failed row: backoff (or dead), and its key stays held behind it. */
  async recordFailure(row: LeasedRow, outcome: Classified): Promise<void> {
    const { options: o, metrics, pool, logger, events, instance } = this.#d;
    metrics.failures.inc({ reason: outcome.reason });
    const attempt = row.attempts + 1;
    // JetStream itself was down: the attempt counts and backs off, but an outage kills no row (Classified.outage).
    const dead = outcome.permanent || (attempt >= o.maxAttempts && !outcome.outage);
    const error = failureText(outcome, row.subject);
    const delay = backoffDelayMs(attempt, o.backoffBaseMs, o.backoffMaxMs);
    try {
      const r = await withRetries('recording a failure', logger, () =>
        pool.query(this.#markFailedSql, [[row.seq], [error], [delay], [dead], [row.epoch], instance, [row.lane], [row.attempts]]),
      );
      // Fenced: the lane was lost (its new holder decides about the row), or an operator retried or
      // discarded the row while it was on the wire (their word stands).
      if (r.rowCount === 0) return;
    } catch (err) {
      logger.error({ err, id: row.id }, 'could not record a failed attempt; the row will be tried again');
    }
    // Not while JetStream itself is down: the circuit breaker says that once, for every key (200 failing
    // heads would otherwise write 200 lines of one outage).
    if (!dead && !outcome.outage && isPowerOfTwo(attempt)) {
      // One line at a head's first failure, then at each doubling of its attempts: a key backing off
      // is visible at warn from its first attempt (it used to log nothing until it went dead, some 22
      // minutes later with the defaults), and a key failing for hours writes about 25 lines, not one a try.
      logger.warn(
        {
          event: 'key-backing-off',
          id: row.id,
          key: row.key,
          seq: row.seq,
          subject: row.subject,
          reason: outcome.reason,
          attempt,
          nextAttemptInMs: delay,
        },
        `key ${row.key} is backing off: attempt ${attempt} of ${o.maxAttempts} failed (${error}); next attempt in ${delay} ms, and its later events wait behind it (ferry status lists blocked keys)`,
      );
    }
    if (dead) {
      logger.error(
        { id: row.id, key: row.key, seq: row.seq, reason: outcome.reason, error: outcome.message },
        'event is dead: its key is blocked until ferry dlq retry or discard',
      );
      events.emit('relay:row:dead', { id: row.id, key: row.key, seq: row.seq, reason: outcome.reason, error: outcome.message });
    }
    events.emit('relay:batch:published', { rows: 1, published: 0, failed: 1, durationMs: 0 });
  }
}
