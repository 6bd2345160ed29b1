import {
  deleteInBatches,
  FERRY_RELEASE,
  MigrationError,
  RELAY_FLOOR_SETTING,
  RELAY_PROTOCOL,
  relayBossSchemaFor,
  relayFloorSql,
  startPruner,
  stopPruner,
} from '@ferry/core';
import type pg from 'pg';
import { PgBoss } from 'pg-boss';
import { prunePublishedSql, pruneRecognisedIdsSql } from '../sql/prune-published.js';
import { readRetentionSql } from '../sql/retention.js';
import type { Logger } from '../types.js';

export const PRUNE_QUEUE = 'ferry-prune';
/** A prune run stops after this many batches even if rows remain; the next occurrence goes on. */
const MAX_BATCHES_PER_RUN = 1000;

export interface JanitorOptions {
  databaseUrl: string;
  pool: pg.Pool;
  schema: string;
  schemaSql: string;
  applicationName: string;
  /** Used only when the outbox has no stored retention (a schema before migration 000006). */
  retentionMs: number;
  pruneCron: string;
  pruneBatchSize: number;
  cronMonitorIntervalSeconds: number;
  logger: Logger;
  /** Called after each prune run this instance performed, with the pg-boss job id. */
  onPrune: (deleted: number, jobId: string) => void;
}

/**
 * Runs the relay's maintenance through pg-boss: a cron schedule puts one
 * prune job per occurrence into a queue (pg-boss's per-occurrence singleton
 * makes that one job however many relays run the schedule), and whichever
 * instance's worker fetches it prunes published rows older than the
 * retention window, in bounded batches.
 */
export class Janitor {
  readonly #o: JanitorOptions;
  readonly #sql: string;
  readonly #forgetSql: string;
  readonly #retentionSql: string;
  #boss: PgBoss | undefined;

  constructor(options: JanitorOptions) {
    this.#o = options;
    this.#sql = prunePublishedSql(options.schemaSql);
    this.#forgetSql = pruneRecognisedIdsSql(options.schemaSql);
    this.#retentionSql = readRetentionSql(options.schemaSql);
  }

  async start(): Promise<void> {
    const o = this.#o;
    const boss = new PgBoss({
      connectionString: o.databaseUrl,
      // Its own pg-boss, apart from the inbox's parking lot in `<schema>_boss`: see relayBossSchemaFor.
      schema: relayBossSchemaFor(o.schema),
      application_name: `${o.applicationName}:boss`,
      max: 2,
      cronMonitorIntervalSeconds: o.cronMonitorIntervalSeconds,
      cronWorkerIntervalSeconds: Math.min(5, o.cronMonitorIntervalSeconds),
      registerInstance: false,
    });
    this.#boss = boss;
    await startPruner(boss, {
      ownBoss: { onError: (err) => o.logger.warn({ err }, 'pg-boss error') },
      queue: PRUNE_QUEUE,
      queueOptions: { retryLimit: 2, expireInSeconds: 15 * 60 },
      cron: o.pruneCron,
      // No retention in the job's data: pg-boss keeps the data of the last instance that called
      // schedule() (an upsert), and the job reads the outbox's own retention when it runs.
      data: {},
      scheduleOptions: { tz: 'UTC' },
      workOptions: { pollingIntervalSeconds: Math.min(2, o.cronMonitorIntervalSeconds) },
      run: async (jobs) => {
        let deleted = 0;
        for (const job of jobs) {
          const n = await this.prune();
          deleted += n;
          o.onPrune(n, job.id);
        }
        return { deleted };
      },
    });
  }

  /**
   * Deletes published rows older than the retention window, one bounded batch
   * per statement, keeping their ids recognisable for another retention; then
   * forgets the ids pruned longer ago than that.
   */
  async prune(): Promise<number> {
    const o = this.#o;
    await this.#requireFloor();
    const retentionMs = await this.retentionMs();
    const total = await this.#inBatches(this.#sql, retentionMs);
    // The ids of rows pruned more than a retention ago: a re-publish of one is no longer recognised.
    const forgotten = await this.#inBatches(this.#forgetSql, retentionMs);
    o.logger.info({ deleted: total, forgottenIds: forgotten, retentionMs }, 'pruned published outbox rows');
    return total;
  }

  /**
   * Refuses to prune once the schema's relay floor is above this relay's protocol (a newer release
   * migrated the schema while this one ran): the lease trigger already refuses it every lane, and its
   * prune must not go on deleting by the old rules either. The job fails, so pg-boss retries it and
   * an instance at the floor may take it. The delete statements check the floor too (`$3`).
   */
  async #requireFloor(): Promise<void> {
    const { rows } = await this.#o.pool.query<{ value: string }>(relayFloorSql(this.#o.schemaSql));
    const floor = Number(rows[0]?.value ?? 0);
    if (floor > RELAY_PROTOCOL) {
      const message = `schema "${this.#o.schema}" admits relay protocol ${floor} or later (settings ${RELAY_FLOOR_SETTING}); this relay is release ${FERRY_RELEASE}, relay protocol ${RELAY_PROTOCOL}, below the floor: it prunes nothing; stop it and run the release that migrated the schema`;
      this.#o.logger.warn({ event: 'prune-below-floor', floor, protocol: RELAY_PROTOCOL }, message);
      throw new MigrationError(message);
    }
  }

  /** Runs a bounded delete (`$1` retention, `$2` batch size, `$3` this relay's protocol) until a batch comes back short; returns rows deleted. */
  #inBatches(sql: string, retentionMs: number): Promise<number> {
    const { pool, pruneBatchSize } = this.#o;
    return deleteInBatches(
      async () => ((await pool.query(sql, [retentionMs, pruneBatchSize, RELAY_PROTOCOL])) as { rowCount?: number | null }).rowCount ?? 0,
      pruneBatchSize,
      MAX_BATCHES_PER_RUN,
    );
  }

  /** The outbox's stored retention (one per outbox, whichever instance asks). */
  async retentionMs(): Promise<number> {
    const { rows } = await this.#o.pool.query<{ ms: string }>(this.#retentionSql);
    const stored = rows[0]?.ms;
    return stored === undefined ? this.#o.retentionMs : Number(stored);
  }

  async stop(): Promise<void> {
    const boss = this.#boss;
    this.#boss = undefined;
    if (boss) await stopPruner(boss, PRUNE_QUEUE, true).catch((err) => this.#o.logger.warn({ err }, 'pg-boss stop failed'));
  }
}
