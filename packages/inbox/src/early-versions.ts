import { type FerryEvent, pgBossDb, withTransaction } from '@ferry/core';
import type { PgBoss } from 'pg-boss';
import { MAX_TRACKED } from './delivery-attempts.js';
import type { Gate } from './gate.js';
import type { KeyScheduler } from './key-scheduler.js';
import { boundedTransaction, type CompiledInboxOptions, ownQueries } from './options.js';
import { errorText, type GateOutcome, type OutcomeReporter } from './outcomes.js';
import { decodeParked, PARK_HEARTBEAT_SECONDS, type ParkedJobData } from './parked-job.js';
import {
  deleteEarly,
  deleteEarlySql,
  failEarly,
  findEarlyWork,
  lockFirstEarly,
  type ReadyEarly,
  readyEarlyRun,
} from './sql/early-statements.js';
import { lockKey } from './sql/lock-key.js';
import { addParked } from './sql/park-count.js';
import { orderParked } from './sql/park-order.js';
import { inProcessSpan } from './tracing.js';
import type { ParkReason } from './types.js';

/** A stored early version sent to the parking lot. */
interface MovedEarly {
  id: string | undefined;
  key: string;
  version: bigint;
  reason: ParkReason;
  error: string;
  jobId: string | null;
}

/** Keys with stored early versions the sweep hands out per round. */
const SWEEP_BATCH = 100;
/** Stored versions read per round trip while draining a key. */
const DRAIN_BATCH = 100;

export interface EarlyVersionsOptions {
  o: CompiledInboxOptions;
  /** The quoted schema, escaped once. */
  s: string;
  /** The quoted pg-boss schema, escaped once. */
  b: string;
  parkQueue: string;
  scheduler: KeyScheduler;
  gate: Gate;
  report: OutcomeReporter;
  /** The started pg-boss (throws before start). */
  boss: () => PgBoss;
  /** Whether the inbox is stopping. */
  stopping: () => boolean;
  /** The nak delay of a failed attempt. */
  backoffMs: (attempt: number) => number;
}

/**
 * `sequential` mode: versions that arrive before their predecessor wait in
 * `inbox_early` (docs/inbox-modes.md). This drains a key's stored versions
 * once the gap closes, moves them to the parking lot behind a parked one or
 * after `gapTimeoutMs`, and sweeps for both on a timer.
 */
export class EarlyVersions {
  /** What it works with, kept as given (its parts are the inbox's, shared with the other components). */
  readonly #p: EarlyVersionsOptions;
  /** Keys this process stored early versions of, so applying their predecessor looks for them at once. */
  readonly #earlyKeys = new Set<string>();
  /** Keys with an early-version drain or flush queued in the scheduler (not queued twice). */
  readonly #earlyQueued = new Set<string>();
  #sweepTimer: NodeJS.Timeout | undefined;
  #sweeping: Promise<void> | undefined;

  constructor(options: EarlyVersionsOptions) {
    this.#p = options;
  }

  /** Looks at stored early versions every `everyMs` (see `#sweepEarly`). */
  startSweeping(everyMs: number): void {
    this.#sweepTimer = setInterval(() => {
      this.#sweeping ??= this.#sweepEarly().finally(() => {
        this.#sweeping = undefined;
      });
    }, everyMs);
  }

  stopSweeping(): void {
    clearInterval(this.#sweepTimer);
  }

  /** The sweep under way, if any. */
  get sweeping(): Promise<void> | undefined {
    return this.#sweeping;
  }

  /** Notes that this process stored an early version of `key`. */
  held(key: string): void {
    if (this.#earlyKeys.size >= MAX_TRACKED) this.#earlyKeys.clear(); // only a hint: the sweep finds the rest
    this.#earlyKeys.add(key);
  }

  /** After `key`'s version was applied from the stream: applies its stored followers, if this process stored any. */
  async applied(key: string): Promise<void> {
    if (this.#earlyKeys.has(key)) await this.drain(key);
  }

  /** Runs a drain or flush of a key's stored versions in the key's turn of the scheduler, once. */
  queue(key: string, what: 'drain' | 'flush'): void {
    const id = `${what}\u0000${key}`;
    if (this.#p.stopping() || this.#earlyQueued.has(id)) return;
    this.#earlyQueued.add(id);
    this.#p.scheduler.push(key, async () => {
      this.#earlyQueued.delete(id);
      if (what === 'drain') await this.drain(key);
      else await this.flush(key, 'gap-timeout', undefined, false);
    });
  }

  /**
   * Applies a key's stored versions that follow its recorded one, in order,
   * each through the gate in a transaction that also deletes it. Stops at the
   * first version not stored (or not due). Runs in the key's scheduler turn.
   */
  async drain(key: string): Promise<void> {
    const o = this.#p.o;
    for (;;) {
      const run = await readyEarlyRun(ownQueries(o), this.#p.s, o.consumer, key, DRAIN_BATCH);
      if (run.length === 0) return;
      for (const next of run) {
        if (this.#p.stopping()) return;
        const go = await this.#applyEarly(key, next);
        if (!go) return;
      }
    }
  }

  /** One stored version through the gate; `false` when the drain must stop there. */
  async #applyEarly(key: string, next: ReadyEarly): Promise<boolean> {
    const o = this.#p.o;
    let event: FerryEvent;
    try {
      event = decodeParked(next.message);
    } catch (err) {
      await this.flush(key, 'undecodable-headers', errorText(err), true);
      return false;
    }
    const attempt = next.attempts + 1;
    return inProcessSpan(event, o.stream, o.consumer, { attempt, via: 'early' }, () => this.#applyEarlyEvent(key, next, event, attempt));
  }

  async #applyEarlyEvent(key: string, next: ReadyEarly, event: FerryEvent, attempt: number): Promise<boolean> {
    const o = this.#p.o;
    let outcome: GateOutcome;
    try {
      outcome = await this.#p.gate.run(event, attempt, false, { commitWith: deleteEarlySql(this.#p.s, o.consumer, key, next.version) });
    } catch (error) {
      const willRetry = attempt < o.maxDeliver;
      this.#p.report.failed(event, attempt, error, willRetry);
      if (willRetry) await failEarly(ownQueries(o), this.#p.s, o.consumer, key, next.version, this.#p.backoffMs(attempt));
      else await this.flush(key, 'handler-failed', errorText(error), true);
      return false;
    }
    if (this.#p.report.settled(outcome, event, false)) return true;
    // A key that got parked events meanwhile keeps its stored versions until the parking lot is through.
    if (outcome.kind === 'park' && outcome.reason !== 'behind-parked') await this.flush(key, outcome.reason, outcome.error, true);
    return false;
  }

  /**
   * Moves a key's stored versions to the parking lot, in version order, each in
   * a transaction with the key's parked count: the first with `reason`, the
   * rest `behind-parked`. For a gap timeout (`force` false) nothing moves when
   * the gap closed meanwhile; the key is drained instead.
   */
  async flush(key: string, reason: ParkReason, error: string | undefined, force: boolean): Promise<void> {
    const o = this.#p.o;
    const boss = this.#p.boss();
    const moved: MovedEarly[] = [];
    // One stored version per transaction, each under the key's row lock and each followed by
    // orderParked: the key's parked events are in version order at every commit, whatever another
    // instance parks for the key between two of them (issue 28), and the stream is not held up
    // behind one long transaction.
    for (;;) {
      const step = await withTransaction(
        o.pool,
        async (tx): Promise<'ready' | 'done' | MovedEarly> => {
          const row = await lockKey(tx, this.#p.s, o.consumer, key);
          const e = await lockFirstEarly(tx, this.#p.s, o.consumer, key, row.version);
          if (!e) return 'done';
          const head = moved[0];
          if (!head && !force && e.version === row.version + 1n && row.parked === 0) return 'ready';
          let why: { reason: ParkReason; error: string };
          if (head) why = { reason: 'behind-parked', error: `key ${JSON.stringify(key)} has version ${head.version} parked ahead of it` };
          else if (row.parked > 0 && !force)
            why = { reason: 'behind-parked', error: `key ${JSON.stringify(key)} has ${row.parked} parked event(s) ahead of it` };
          else why = { reason, error: error ?? `waited ${e.waitedMs} ms for version ${row.version + 1n} of key ${JSON.stringify(key)}` };
          const data: ParkedJobData = { ...e.message, reason: why.reason, error: why.error, parkedAt: new Date().toISOString() };
          const jobId = await boss.send(this.#p.parkQueue, data, {
            singletonKey: key,
            heartbeatSeconds: PARK_HEARTBEAT_SECONDS,
            ...o.parkRetry,
            db: pgBossDb(tx),
          });
          await addParked(tx, this.#p.s, o.consumer, key, 1);
          await deleteEarly(tx, this.#p.s, o.consumer, key, e.version);
          await orderParked(tx, this.#p.b, this.#p.parkQueue, key, jobId ? { added: { id: jobId, version: e.version } } : {});
          return { id: e.message.id, key, version: e.version, ...why, jobId };
        },
        boundedTransaction(o),
      );
      if (step === 'ready') {
        await this.drain(key);
        return;
      }
      if (step === 'done') break;
      moved.push(step);
    }
    this.#reportMoved(moved);
  }

  /** Counts and reports stored early versions that moved to the parking lot. */
  #reportMoved(moved: readonly MovedEarly[]): void {
    const o = this.#p.o;
    for (const p of moved) this.#p.report.parked(p);
    const [head] = moved;
    if (head) {
      o.logger.warn(
        { consumer: o.consumer, key: head.key, reason: head.reason, error: head.error, parked: moved.length },
        'inbox parked stored early versions of a key',
      );
    }
  }

  /** The sweep: applies stored versions whose gap closed (on any instance), parks those that waited `gapTimeoutMs`. */
  async #sweepEarly(): Promise<void> {
    const o = this.#p.o;
    if (this.#p.stopping()) return;
    try {
      const work = await findEarlyWork(ownQueries(o), this.#p.s, o.consumer, o.gapTimeoutMs, SWEEP_BATCH);
      for (const w of work) this.queue(w.key, w.ready ? 'drain' : 'flush');
    } catch (err) {
      o.logger.warn({ err, consumer: o.consumer }, 'inbox early-version sweep failed; it runs again shortly');
    }
  }
}
