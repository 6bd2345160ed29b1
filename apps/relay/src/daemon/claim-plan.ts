// What a claim hands the chains: rows with their lease epoch, one chain per key, and the in-flight
// budget (rows and data bytes) that sizes the next claim.
import { LIMITS } from '@ferry/core';
import type { Classified } from '../errors.js';
import type { ClaimedRow } from '../sql/claim-batch.js';

export type Outcome = { ok: true; ackAt: number } | ({ ok: false } & Classified);

/** A claimed row with the epoch its lane was held under when it was claimed: its mark or failure record carries it. */
export type LeasedRow = ClaimedRow & { epoch: string };
/** A row to mark published: its seq and its lease epoch. */
export type Acked = { seq: string; epoch: string; lane: number };

/**
 * Event data bytes held at most (claimed, not yet acknowledged), besides the
 * `maxInFlight` row count: rows alone do not bound memory when payloads are
 * large (2,000 rows of 1 MB took 2.5 GB of RSS; bench/scenarios/relay-memory.ts).
 * Claims are sized by a running estimate of the bytes per row, starting from
 * the server's max_payload.
 */
export const MAX_IN_FLIGHT_BYTES = 64 * 1024 * 1024;

/**
 * Each lane's next cursor after a claim: the key of the lane's highest walk
 * step among the rows kept, the last key the walk reached. After a wrap that
 * is the greatest wrapped key, not the greatest key (claim-batch.ts).
 */
export function laneCursors(rows: ReadonlyArray<Pick<ClaimedRow, 'lane' | 'key' | 'walk_step'>>): Map<number, string> {
  const last = new Map<number, Pick<ClaimedRow, 'key' | 'walk_step'>>();
  for (const r of rows) {
    const before = last.get(r.lane);
    if (before === undefined || r.walk_step > before.walk_step) last.set(r.lane, r);
  }
  return new Map([...last].map(([lane, r]) => [lane, r.key]));
}

/**
 * A claim's rows as one send chain per key, in seq order: each chain stops
 * before its first row that is not due (dead or backing off behind the head).
 */
export function chainsByKey(rows: readonly ClaimedRow[]): ClaimedRow[][] {
  const chains = new Map<string, ClaimedRow[]>();
  const stopped = new Set<string>();
  for (const row of rows) {
    if (stopped.has(row.key)) continue;
    if (!row.due) {
      stopped.add(row.key);
      continue;
    }
    const chain = chains.get(row.key);
    if (chain) chain.push(row);
    else chains.set(row.key, [row]);
  }
  return [...chains.values()];
}

/**
 * Whether a claim's rows suggest more are waiting: it found its limit of keys,
 * or some key got its full share of the room (the claim gives each key found
 * `max(1, floor(room / keys))` rows, so a key that filled its share may have
 * more). Rows below every share mean each key found was claimed to its end.
 */
export function claimFoundBacklog(rows: readonly ClaimedRow[], keyLimit: number, room: number): boolean {
  const perKey = new Map<string, number>();
  for (const r of rows) perKey.set(r.key, (perKey.get(r.key) ?? 0) + 1);
  if (perKey.size === 0) return false;
  if (perKey.size >= keyLimit) return true;
  const share = Math.max(1, Math.floor(room / perKey.size));
  for (const n of perKey.values()) if (n >= share) return true;
  return false;
}

/**
 * A chain at least this long fetches its key's next rows while it sends, and
 * goes on with them without a new claim: a hot key's PubAck round trips, not
 * the claim and the mark, set its pace.
 */
export const CONTINUE_AT = 32;
/**
 * A chain that ends wakes the claim loop at once while fewer keys than this
 * are in flight. With more, a claim walks every pending key of its lanes
 * (in-flight keys included: they are skipped only after the walk) and frees
 * little, so the loop waits until half the keys claimed are released or its
 * next poll, 5 ms later.
 */
export const WAKE_BELOW_KEYS = 64;
/**
 * Parallel claim queries per loop iteration (each on its own pool connection,
 * over disjoint lanes) while there is a backlog: the last claim found more
 * rows waiting (claimFoundBacklog). Otherwise one claim covers every leased lane: under
 * a steady load below capacity a poll finds a transaction's rows or two, and
 * a second statement for them costs more than it saves (at 1,000 events/s,
 * half the relay's statements were claims, and a statement costs its
 * round trip's CPU on both sides whatever it finds).
 */
export const CLAIMERS = 2;

/**
 * Rows and bytes claimed and not yet sent or refused: they bound the next claims. Bytes are each
 * row's `row_bytes`, measured in SQL: its data when loaded, and its headers (64 headers of 4,096
 * four-byte characters are 1 MiB, whatever the data; counting data alone let 1,200 such rows of
 * one byte of data take a relay past 1.4 GB).
 */
export class InflightBudget {
  rows = 0;
  bytes = 0;
  /** Running estimate of bytes (row_bytes) per claimed row (undefined before the first claim). */
  rowBytes: number | undefined;

  hold(rows: readonly ClaimedRow[], sign = 1): void {
    for (const r of rows) this.bytes += sign * r.row_bytes;
    this.rows += sign * rows.length;
  }

  release(rows: readonly ClaimedRow[]): void {
    this.hold(rows, -1);
  }

  /**
   * The most data bytes a row may have to be loaded: the server's max_payload (a larger row can
   * never be sent), and never over 64 MiB whatever the server says. Larger rows are measured in
   * SQL, not loaded, and go dead (ChainSender).
   */
  loadableBytes(maxPayload: number | undefined): number {
    return Math.min(maxPayload ?? LIMITS.maxEventBytes, LIMITS.maxEventBytes);
  }

  /** Data bytes a claim may still load: the in-flight byte budget left (a claim always gets its first row). */
  byteRoom(): number {
    return Math.max(0, MAX_IN_FLIGHT_BYTES - this.bytes);
  }

  estimateRowBytes(claimed: ClaimedRow[][]): void {
    let n = 0;
    let bytes = 0;
    for (const rows of claimed) {
      n += rows.length;
      for (const r of rows) bytes += r.row_bytes;
    }
    if (n === 0) return;
    const avg = bytes / n;
    this.rowBytes = this.rowBytes === undefined ? avg : (this.rowBytes + avg) / 2;
  }
}
