import { DEFAULT_SCHEMA, type Queryable, schemaIdentifier, startPruner, validateIdentifier } from '@ferry/core';
import type { PgBoss } from 'pg-boss';
import { type CompiledInboxOptions, pruneQueueName } from './options.js';
import { pruneMessages } from './sql/prune-messages.js';

/** How often the dedupe window is pruned. */
const PRUNE_CRON = '*/15 * * * *';

/**
 * `dedupe` mode: schedules the pruning of the consumer's message ids older
 * than `dedupeRetentionMs` on pg-boss's cron (one instance runs each round)
 * and works it; returns the worker's id.
 */
export async function startDedupePrune(boss: PgBoss, o: CompiledInboxOptions, s: string): Promise<string> {
  return startPruner(boss, {
    queue: pruneQueueName(o.consumer),
    cron: PRUNE_CRON,
    scheduleOptions: { singletonKey: o.consumer },
    run: async () => {
      const n = await pruneMessages(o.pool, s, o.consumer, o.dedupeRetentionMs);
      o.logger.info({ consumer: o.consumer, pruned: n }, 'inbox pruned dedupe window');
    },
  });
}

/** Deletes a consumer's `dedupe` message ids older than `olderThanMs` (what the pg-boss cron job runs). */
export function pruneInboxMessages(options: { pool: Queryable; schema?: string; consumer: string; olderThanMs: number }): Promise<number> {
  return pruneMessages(
    options.pool,
    schemaIdentifier(options.schema ?? DEFAULT_SCHEMA),
    validateIdentifier(options.consumer, 'consumer'),
    options.olderThanMs,
  );
}
