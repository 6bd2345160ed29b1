import { type FerryEvent, pgBossDb } from '@ferry/core';
import type { Job, PgBoss } from 'pg-boss';
import type { EarlyVersions } from './early-versions.js';
import { ParkedGapError, PoisonMessageError } from './errors.js';
import type { Gate } from './gate.js';
import type { CompiledInboxOptions } from './options.js';
import type { OutcomeReporter } from './outcomes.js';
import { decodeParked, isParkedJobData, type ParkedJobData } from './parked-job.js';
import { addParked } from './sql/park-count.js';
import { inProcessSpan } from './tracing.js';

/**
 * The parking lot's worker: pg-boss hands it one parked event at a time, with
 * pg-boss's own retries and backoff, and it runs the event through the same
 * gate as the stream. The job completes in the gate's transaction.
 */
export class ParkWorker {
  readonly #o: CompiledInboxOptions;
  /** The quoted schema, escaped once. */
  readonly #s: string;
  readonly #parkQueue: string;
  readonly #gate: Gate;
  readonly #report: OutcomeReporter;
  readonly #early: EarlyVersions;
  /** The started pg-boss (throws before start). */
  readonly #boss: () => PgBoss;

  constructor(
    o: CompiledInboxOptions,
    s: string,
    parkQueue: string,
    parts: { gate: Gate; report: OutcomeReporter; early: EarlyVersions; boss: () => PgBoss },
  ) {
    this.#o = o;
    this.#s = s;
    this.#parkQueue = parkQueue;
    this.#gate = parts.gate;
    this.#report = parts.report;
    this.#early = parts.early;
    this.#boss = parts.boss;
  }

  /** Creates the consumer's parking lot queue (key_strict_fifo) on `boss` and works it; returns the worker's id. */
  async start(boss: PgBoss): Promise<string> {
    const o = this.#o;
    await boss.createQueue(this.#parkQueue, {
      policy: 'key_strict_fifo',
      retryLimit: o.parkRetryLimit,
      retryDelay: Math.ceil(o.parkRetryDelayMs / 1000),
      retryBackoff: true,
      deleteAfterSeconds: 7 * 86_400,
    });
    return boss.work<ParkedJobData>(
      this.#parkQueue,
      { pollingIntervalSeconds: o.parkPollIntervalMs / 1000, batchSize: 1, localConcurrency: 2 },
      async ([job]) => {
        if (job) await this.retry(job);
      },
    );
  }

  /** Retries one parked event through the same gate; throws (so pg-boss retries, then fails it) when it still cannot apply. */
  async retry(job: Job<ParkedJobData>): Promise<void> {
    const o = this.#o;
    const boss = this.#boss();
    if (!isParkedJobData(job.data)) throw new PoisonMessageError('undecodable-headers', `parked job ${job.id} is not a Ferry parked event`);
    const event = decodeParked(job.data);
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
    if (outcome.kind === 'park')
      throw new PoisonMessageError(outcome.reason === 'unknown-type' ? 'unknown-type' : 'undecodable-body', outcome.error);
    if (outcome.kind === 'gap') {
      throw new ParkedGapError(
        `version ${event.version} of key ${JSON.stringify(event.key)} waits for version ${outcome.recorded + 1n}, which is neither applied nor parked`,
      );
    }
    this.#report.settled(outcome, event, true);
    if (outcome.kind === 'applied' && o.mode === 'sequential') this.#early.queue(event.key, 'drain');
  }
}
