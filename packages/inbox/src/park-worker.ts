import { type FerryEvent, pgBossDb, withTransaction } from '@ferry/core';
import type { Job, PgBoss } from 'pg-boss';
import type { EarlyVersions } from './early-versions.js';
import { ParkedGapError, PoisonMessageError } from './errors.js';
import type { Gate } from './gate.js';
import { boundedTransaction, type CompiledInboxOptions } from './options.js';
import type { OutcomeReporter } from './outcomes.js';
import { errorText } from './outcomes.js';
import { decodeParked, PARK_HEARTBEAT_SECONDS, type ParkedJobData, readParkedJob } from './parked-job.js';
import { lockKey } from './sql/lock-key.js';
import { addParked } from './sql/park-count.js';
import { orderParked } from './sql/park-order.js';
import { inProcessSpan } from './tracing.js';
import type { ParkReason } from './types.js';

/**
 * The parking lot's worker: pg-boss hands it one parked event at a time, with
 * pg-boss's own retries and backoff, and it runs the event through the same
 * gate as the stream. The job completes in the gate's transaction.
 */
export class ParkWorker {
  readonly #o: CompiledInboxOptions;
  /** The quoted schema, escaped once. */
  readonly #s: string;
  /** The quoted pg-boss schema, escaped once. */
  readonly #b: string;
  readonly #parkQueue: string;
  readonly #gate: Gate;
  readonly #report: OutcomeReporter;
  readonly #early: EarlyVersions;
  /** The started pg-boss (throws before start). */
  readonly #boss: () => PgBoss;
  /** pg-boss's id of the park worker, once started. */
  #workerId: string | undefined;

  constructor(
    o: CompiledInboxOptions,
    s: string,
    b: string,
    parkQueue: string,
    parts: { gate: Gate; report: OutcomeReporter; early: EarlyVersions; boss: () => PgBoss },
  ) {
    this.#o = o;
    this.#s = s;
    this.#b = b;
    this.#parkQueue = parkQueue;
    this.#gate = parts.gate;
    this.#report = parts.report;
    this.#early = parts.early;
    this.#boss = parts.boss;
  }

  /** Creates the consumer's parking lot queue (key_strict_fifo) on `boss`, runs `check`, and works the queue; returns the worker's id. */
  async start(boss: PgBoss, check?: () => Promise<void>): Promise<string> {
    const o = this.#o;
    // The retry settings are given on every parked job as well: createQueue leaves an existing queue's as they were.
    await boss.createQueue(this.#parkQueue, {
      policy: 'key_strict_fifo',
      ...o.parkRetry,
      deleteAfterSeconds: 7 * 86_400,
      heartbeatSeconds: PARK_HEARTBEAT_SECONDS,
    });
    if (check) await check();
    this.#workerId = await boss.work<ParkedJobData>(
      this.#parkQueue,
      { pollingIntervalSeconds: o.parkPollIntervalMs / 1000, batchSize: 1, localConcurrency: 2 },
      async ([job]) => {
        if (job) await this.retry(job);
      },
    );
    return this.#workerId;
  }

  /**
   * Retries one parked event through the same gate; throws (so pg-boss retries, then fails it) when it still cannot apply.
   *
   * `sequential`: pg-boss hands the worker the key's head job, which holds the key's lowest parked
   * version (`orderParked` keeps them so). A lower version parked after the fetch cannot apply
   * around it (the gate applies only the next version), so the run fails with a gap; the job is
   * then failed under the key's row lock, unless a lower version was parked meanwhile: then the job
   * takes that one and runs again. So a key's job never goes back to the queue holding a version
   * while a lower one is parked.
   */
  async retry(job: Job<ParkedJobData>): Promise<void> {
    const o = this.#o;
    const boss = this.#boss();
    // The parking lot is a table other roles may write (docs/security.md): read, never trusted.
    const read = readParkedJob(job.data);
    if (read.kind === 'malformed')
      throw new PoisonMessageError('undecodable-headers', `parked job ${job.id} is not a Ferry parked event: ${read.problem}`);
    const key = o.mode === 'sequential' ? read.job.key : undefined;
    if (key === undefined || read.job.version === undefined) {
      await this.#retryOnce(job, read.job, boss);
      return;
    }
    let data = read.job;
    let rerun = false;
    // Each turn runs a strictly lower version than the one before (bounded by the key's recorded
    // version), or, once, the same version again when its gap closed meanwhile.
    for (;;) {
      try {
        await this.#retryOnce(job, data, boss);
        return;
      } catch (err) {
        const next = await this.#failOrLower(job, key, data, err, !rerun);
        if (!next) return; // failed under the lock (pg-boss retries it after its backoff, or it holds the key)
        if (next === data) rerun = true;
        data = next;
      }
    }
  }

  /**
   * Under the key's row lock: sorts the key's parked events into its jobs with `job` first. Returns
   * the event `job` holds now when that changed (a lower version was parked), or (`mayRerun`) the
   * same event when its run failed on a gap that has closed since: an operator's skip of the missing
   * version (`ferry inbox skip`) committed between the run's gate and this lock, and failing the job
   * now would hold the key again. Otherwise fails `job` with `err` in the same transaction and
   * returns undefined.
   */
  async #failOrLower(
    job: Job<ParkedJobData>,
    key: string,
    data: ParkedJobData,
    err: unknown,
    mayRerun: boolean,
  ): Promise<ParkedJobData | undefined> {
    const o = this.#o;
    const boss = this.#boss();
    return withTransaction(
      o.pool,
      async (tx) => {
        const row = await lockKey(tx, this.#s, o.consumer, key);
        const changed = await orderParked(tx, this.#b, this.#parkQueue, key, { active: job.id });
        const mine = changed.find((c) => c.id === job.id);
        if (mine && mine.data.version !== data.version) return mine.data;
        if (mayRerun && err instanceof ParkedGapError && data.version !== undefined && BigInt(data.version) - 1n === row.version)
          return data;
        await boss.fail(this.#parkQueue, { id: job.id, retryCount: job.retryCount }, { message: errorText(err) }, { db: pgBossDb(tx) });
        return undefined;
      },
      boundedTransaction(o),
    );
  }

  async #retryOnce(job: Job<ParkedJobData>, data: ParkedJobData, boss: PgBoss): Promise<void> {
    const o = this.#o;
    const event = decodeParked(data);
    const attempt = job.retryCount + 1;
    await inProcessSpan(event, o.stream, o.consumer, { attempt, via: 'park' }, () => this.#retryParkedEvent(job, event, attempt, boss));
  }

  async #retryParkedEvent(job: Job<ParkedJobData>, event: FerryEvent, attempt: number, boss: PgBoss): Promise<void> {
    const o = this.#o;
    const outcome = await this.#gate.run(event, attempt, true, {
      beforeCommit: async (tx) => {
        if (o.mode === 'sequential') await addParked(tx, this.#s, o.consumer, event.key, -1);
        await boss.complete(this.#parkQueue, job.id, null, { db: pgBossDb(tx) });
      },
    });
    if (outcome.kind === 'park') throw new PoisonMessageError(poisonReason(outcome.reason), outcome.error);
    if (outcome.kind === 'gap') {
      throw new ParkedGapError(
        `version ${event.version} of key ${JSON.stringify(event.key)} waits for version ${outcome.recorded + 1n}, which is neither applied nor parked (if it never comes: ferry inbox parked list names the fix)`,
      );
    }
    this.#report.settled(outcome, event, true);
    // The key's next parked event (if any) is due now: fetch again at once instead of after the poll
    // interval, so a key's parked chain drains at the handler's pace, not one event per poll.
    if (this.#workerId) boss.notifyWorker(this.#workerId);
    if (outcome.kind === 'applied' && o.mode === 'sequential') this.#early.queue(event.key, 'drain');
  }
}

/** The reason a parked event's retry fails with: the gate's own, or `undecodable-body` for one that is not about the event's body. */
function poisonReason(reason: ParkReason): PoisonMessageError['reason'] {
  switch (reason) {
    case 'unknown-type':
    case 'invalid-data':
    case 'unknown-version':
    case 'upcast-failed':
      return reason;
    default:
      return 'undecodable-body';
  }
}
