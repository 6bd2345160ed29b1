import { startPgBoss } from './pg-boss.js';

/**
 * The part of a pg-boss instance a pruner uses, declared here so core needs
 * no pg-boss (a `PgBoss` fits it).
 */
export interface PrunerBoss {
  on(event: 'error', listener: (err: Error) => void): unknown;
  start(): Promise<unknown>;
  stop(options?: { graceful?: boolean; timeout?: number }): Promise<void>;
  createQueue(name: string, options?: object): Promise<unknown>;
  schedule(name: string, cron: string, data?: object | null, options?: object): Promise<unknown>;
  work(name: string, options: object, handler: (jobs: Array<{ id: string }>) => Promise<unknown>): Promise<string>;
  offWork(name: string, options?: { wait?: boolean }): Promise<void>;
}

/** What {@link startPruner} schedules: one pg-boss queue fed by a cron schedule, and its worker. */
export interface PrunerSchedule {
  queue: string;
  /** pg-boss queue options (`createQueue`). */
  queueOptions?: object;
  /** When to prune: a cron expression. */
  cron: string;
  /** The scheduled job's data. Default `null`. */
  data?: object | null;
  /** pg-boss schedule options (`tz`, `singletonKey`). */
  scheduleOptions?: object;
  /** pg-boss work options (polling interval). */
  workOptions?: object;
  /** Runs the fetched prune jobs; what it returns completes them. */
  run: (jobs: Array<{ id: string }>) => Promise<unknown>;
  /**
   * Set when the pruner owns `boss`: errors go here, and `boss` is started
   * (with {@link startPgBoss}) before the queue is created. Leave it out for a
   * pg-boss the caller starts and stops.
   */
  ownBoss?: { onError: (err: Error) => void };
}

/**
 * The one pruning mechanism of Ferry (the relay's published rows, expired
 * idempotency keys, an inbox's dedupe window): a pg-boss cron schedule puts
 * one prune job per occurrence into a queue, so however many instances run
 * the schedule, one of them prunes each round. Starts `boss` when it is the
 * pruner's own, creates the queue, registers the schedule and works it;
 * returns the worker's id.
 */
export async function startPruner(boss: PrunerBoss, s: PrunerSchedule): Promise<string> {
  if (s.ownBoss) {
    boss.on('error', s.ownBoss.onError);
    await startPgBoss(() => boss.start());
  }
  await boss.createQueue(s.queue, s.queueOptions);
  await boss.schedule(s.queue, s.cron, s.data ?? null, s.scheduleOptions);
  return boss.work(s.queue, s.workOptions ?? {}, s.run);
}

/**
 * Stops a pruner: its own pg-boss gracefully (up to 10 s for a running
 * prune), or only its worker on a pg-boss the caller owns.
 */
export async function stopPruner(boss: PrunerBoss, queue: string, ownsBoss: boolean): Promise<void> {
  if (ownsBoss) await boss.stop({ graceful: true, timeout: 10_000 });
  else await boss.offWork(queue, { wait: true });
}

/**
 * Runs a bounded delete (`deleteBatch`, which deletes at most `batchSize`
 * rows and returns how many it deleted) until a batch comes back short or
 * `maxBatches` ran; the next run carries on. Returns the rows deleted. One
 * short statement per batch keeps locks and WAL bursts small.
 */
export async function deleteInBatches(deleteBatch: () => Promise<number>, batchSize: number, maxBatches: number): Promise<number> {
  let total = 0;
  for (let i = 0; i < maxBatches; i++) {
    const n = await deleteBatch();
    total += n;
    if (n < batchSize) break;
  }
  return total;
}
