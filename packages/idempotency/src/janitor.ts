import {
  ConfigError,
  type ConnectionPool,
  DEFAULT_SCHEMA,
  deleteInBatches,
  describeValue,
  idempotencyBossSchemaFor,
  quoteIdentifier,
  SILENT_LOGGER,
  startPruner,
  stopPruner,
  ValidationError,
  validateIdentifier,
} from '@ferry/core';
import { PgBoss } from 'pg-boss';
import { pruneExpiredSql } from './sql/prune-expired.js';
import type { Logger } from './types.js';

/**
 * What `createIdempotencyJanitor()` accepts: `pool`, and either `boss` or
 * `connectionString`; every other option has the default named on it.
 *
 * @example
 * createIdempotencyJanitor({
 *   pool,
 *   connectionString: process.env.DATABASE_URL, // the janitor's own pg-boss…
 *   bossSchema: 'ferry_idempotency_boss',       // …in this schema (the default: `<schema>_idempotency_boss`)
 *   cron: '*\/5 * * * *',                        // default: every 5 minutes
 * });
 */
export interface IdempotencyJanitorOptions {
  /** Where `idempotency_keys` lives; the prune statements run on it. */
  pool: ConnectionPool;
  /** Schema of `idempotency_keys`. Default `ferry`. */
  schema?: string;
  /** A pg-boss instance you own and start/stop yourself. Or give `connectionString` and the janitor runs its own. */
  boss?: PgBoss;
  /** Database for the janitor's own pg-boss (ignored with `boss`). */
  connectionString?: string;
  /**
   * Schema of the janitor's own pg-boss, kept apart from Ferry's tables and from the inbox's
   * parking lot (`<schema>_boss`), so the janitor's role needs no privilege on parked events.
   * Default `<schema>_idempotency_boss` (`<schema>_boss` before issue 32: its old schedule
   * there is harmless; `ferry migrate --idempotency --boss` removes it).
   */
  bossSchema?: string;
  /** When to prune: a cron expression (UTC). Default every 5 minutes. */
  cron?: string;
  /** Rows deleted per statement (one short transaction each). Default 1000. */
  batchSize?: number;
  /** Statements per run at most; the next run carries on. Default 100. */
  maxBatchesPerRun?: number;
  /** How often the worker polls its queue. Default 30 000 ms (min 500). */
  pollIntervalMs?: number;
  /** Where the janitor logs (pino-compatible): each run's count, pg-boss errors. Default: silent. */
  logger?: Logger;
}

export type JanitorState = 'idle' | 'starting' | 'running' | 'stopping' | 'stopped' | 'failed';

/**
 * Prunes expired idempotency keys on a pg-boss cron schedule, in bounded
 * batches; pg-boss makes exactly one instance run each occurrence.
 *
 * @example
 * const janitor = createIdempotencyJanitor({ pool, connectionString: url, schema: 'ferry' });
 * await janitor.start();   // on shutdown: await janitor.stop();
 */
export interface IdempotencyJanitor {
  readonly state: JanitorState;
  /** The pg-boss queue the cron schedule feeds. */
  readonly queue: string;
  /** Creates the queue and the schedule, and starts the worker. Idempotent; after `stop()` it rejects with a `ConfigError`. */
  start(): Promise<void>;
  /** Stops the worker (and the janitor's own pg-boss). Idempotent. */
  stop(): Promise<void>;
  /** Queues a prune run now, outside the schedule (ops, tests). Returns the job id. */
  triggerNow(): Promise<string | null>;
  /** Prunes expired keys on this process now, in bounded batches; returns how many were deleted. */
  pruneOnce(): Promise<number>;
}

class Janitor implements IdempotencyJanitor {
  readonly queue: string;
  #state: JanitorState = 'idle';
  #starting: Promise<void> | undefined;
  #stopping: Promise<void> | undefined;
  readonly #pool: ConnectionPool;
  readonly #boss: PgBoss;
  readonly #ownsBoss: boolean;
  readonly #sql: string;
  readonly #cron: string;
  readonly #batchSize: number;
  readonly #maxBatches: number;
  readonly #pollIntervalMs: number;
  readonly #logger: Logger;

  constructor(o: IdempotencyJanitorOptions) {
    if (typeof o !== 'object' || o === null || typeof o.pool?.query !== 'function') {
      throw new ValidationError('pool', 'createIdempotencyJanitor needs { pool } (a pg.Pool on the database holding idempotency_keys)');
    }
    const schema = validateIdentifier(o.schema ?? DEFAULT_SCHEMA, 'schema');
    this.#pool = o.pool;
    this.#sql = pruneExpiredSql(quoteIdentifier(schema));
    this.queue = `ferry.idempotency.prune.${schema}`;
    this.#cron = o.cron ?? '*/5 * * * *';
    if (typeof this.#cron !== 'string' || this.#cron.trim().split(/\s+/).length < 5) {
      throw new ValidationError('cron', `cron must be a cron expression such as "*/5 * * * *", got ${describeValue(o.cron)}`);
    }
    this.#batchSize = intOption('batchSize', o.batchSize ?? 1000, 1, 100_000);
    this.#maxBatches = intOption('maxBatchesPerRun', o.maxBatchesPerRun ?? 100, 1, 100_000);
    this.#pollIntervalMs = intOption('pollIntervalMs', o.pollIntervalMs ?? 30_000, 500, 3_600_000);
    this.#logger = o.logger ?? SILENT_LOGGER;
    if (o.boss) {
      this.#boss = o.boss;
      this.#ownsBoss = false;
    } else {
      if (typeof o.connectionString !== 'string' || o.connectionString.length === 0) {
        throw new ValidationError(
          'connectionString',
          'createIdempotencyJanitor needs a pg-boss: pass `boss`, or `connectionString` for one of its own',
        );
      }
      const bossSchema = validateIdentifier(o.bossSchema ?? idempotencyBossSchemaFor(schema), 'bossSchema');
      this.#boss = new PgBoss({ connectionString: o.connectionString, schema: bossSchema, max: 2 });
      this.#ownsBoss = true;
    }
  }

  get state(): JanitorState {
    return this.#state;
  }

  start(): Promise<void> {
    if (this.#state === 'stopping' || this.#state === 'stopped') {
      return Promise.reject(new ConfigError('start', 'this idempotency janitor was stopped; create a new one'));
    }
    if (this.#state === 'running') return Promise.resolve();
    this.#starting ??= this.#start().finally(() => {
      this.#starting = undefined;
    });
    return this.#starting;
  }

  async #start(): Promise<void> {
    this.#state = 'starting';
    try {
      await startPruner(this.#boss, {
        ownBoss: this.#ownsBoss
          ? { onError: (err) => this.#logger.error({ event: 'idempotency:janitor:error', err }, 'pg-boss error') }
          : undefined,
        queue: this.queue,
        queueOptions: { policy: 'singleton' },
        cron: this.#cron,
        scheduleOptions: { tz: 'UTC' },
        workOptions: { pollingIntervalSeconds: this.#pollIntervalMs / 1000 },
        run: async () => {
          await this.pruneOnce();
        },
      });
      this.#state = 'running';
    } catch (err) {
      this.#state = 'failed';
      throw err;
    }
  }

  stop(): Promise<void> {
    if (this.#state === 'stopped' || this.#state === 'idle') return Promise.resolve();
    this.#stopping ??= this.#stop().finally(() => {
      this.#stopping = undefined;
    });
    return this.#stopping;
  }

  async #stop(): Promise<void> {
    await this.#starting?.catch(() => {});
    this.#state = 'stopping';
    try {
      await stopPruner(this.#boss, this.queue, this.#ownsBoss);
    } finally {
      this.#state = 'stopped';
    }
  }

  triggerNow(): Promise<string | null> {
    return this.#boss.send(this.queue, null);
  }

  async pruneOnce(): Promise<number> {
    const started = Date.now();
    const deleted = await deleteInBatches(
      async () => ((await this.#pool.query(this.#sql, [this.#batchSize])) as { rowCount?: number | null }).rowCount ?? 0,
      this.#batchSize,
      this.#maxBatches,
    );
    this.#logger.info(
      { event: 'idempotency:janitor:pruned', deleted, durationMs: Date.now() - started },
      'pruned expired idempotency keys',
    );
    return deleted;
  }
}

function intOption(name: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new ValidationError(name, `${name} must be an integer from ${min} to ${max}, got ${describeValue(value)}`);
  }
  return value;
}

/**
 * Creates the janitor that prunes expired keys; see {@link IdempotencyJanitor}
 * and {@link IdempotencyJanitorOptions}. Options are validated here; nothing
 * connects until `start()`.
 *
 * @example
 * const janitor = createIdempotencyJanitor({ pool, connectionString: url });
 * await janitor.start(); // on shutdown: await janitor.stop();
 */
export function createIdempotencyJanitor(options: IdempotencyJanitorOptions): IdempotencyJanitor {
  return new Janitor(options);
}
