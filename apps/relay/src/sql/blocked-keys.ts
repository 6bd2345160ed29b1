import { waitingBehind } from './outbox-state.js';
/**
 * The keys held behind a failed row, oldest first, at most `$1`: the failed
 * row (only a key's head is ever sent, so a failed row heads its key), its
 * state and reason, and how many later rows of the key wait behind it. The
 * failed rows come from `outbox_pending_failed_idx` (failed rows only); the
 * waiting count walks the key's pending rows in `outbox_pending_walk_idx`.
 */
export function blockedKeysSql(schemaSql: string): string {
  return `SELECT h.key, h.id::text AS id, h.seq::text AS seq, h.version::text AS version, h.attempts, h.last_error,
       h.dead_at, h.next_attempt_at,
       ${waitingBehind(schemaSql, 'h')}::int AS waiting
  FROM (SELECT DISTINCT ON (p.key) p.key, p.lane, o.id, p.seq, o.version, p.attempts, p.last_error, p.dead_at, p.next_attempt_at
          FROM ${schemaSql}.outbox_pending p JOIN ${schemaSql}.outbox o ON o.seq = p.seq
         WHERE p.attempts > 0
         ORDER BY p.key, p.seq) h
 ORDER BY h.seq
 LIMIT $1`;
}

export interface BlockedKeyRow {
  key: string;
  id: string;
  seq: string;
  version: string;
  attempts: number;
  last_error: string | null;
  dead_at: Date | null;
  next_attempt_at: Date;
  waiting: number;
}

/** A blocked key as `ferry status` and `ferry dlq list` report it. */
export interface BlockedKey {
  key: string;
  /** The failed row holding the key. */
  id: string;
  version: string;
  state: 'dead' | 'backing-off';
  attempts: number;
  reason: string | null;
  /** Later rows of the key waiting behind it. */
  waiting: number;
  /** When the next attempt is due (null when dead). */
  nextAttemptAt: string | null;
}

export function toBlockedKey(r: BlockedKeyRow): BlockedKey {
  return {
    key: r.key,
    id: r.id,
    version: r.version,
    state: r.dead_at ? 'dead' : 'backing-off',
    attempts: r.attempts,
    reason: r.last_error,
    waiting: r.waiting,
    nextAttemptAt: r.dead_at ? null : r.next_attempt_at.toISOString(),
  };
}
