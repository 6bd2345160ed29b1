import type { EventEmitter } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { encodedSize, encodeEvent, eventFromOutboxRow } from '@ferry/core';
import type { JetStreamClient } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/transport-node';
import { BrokenCircuitError, type CircuitBreakerPolicy, CircuitState, IsolatedCircuitError } from 'cockatiel';
import type pg from 'pg';
import { type Classified, classifyPublishError, NatsUnavailableError } from './errors.js';
import type { LaneLeaser } from './lane-leaser.js';
import type { RelayMetrics } from './metrics.js';
import { backoffDelayMs } from './relay-options.js';
import { type ClaimedRow, claimBatchSql } from './sql/claim-batch.js';
import { markFailedSql } from './sql/mark-failed.js';
import { markPublishedSql } from './sql/mark-published.js';
import type { CompiledRelayOptions, Logger } from './types.js';

/** `skipped`: not sent because an earlier row of its key in the batch was refused before sending. */
type Outcome = { ok: true; ackAt: number } | ({ ok: false; skipped?: boolean } & Classified);

export interface DispatcherDeps {
  options: CompiledRelayOptions;
  schemaSql: string;
  pool: pg.Pool;
  js: JetStreamClient;
  leaser: LaneLeaser;
  breaker: CircuitBreakerPolicy;
  metrics: RelayMetrics;
  events: EventEmitter;
  logger: Logger;
  /** Whether the NATS connection is up right now. */
  natsUp: () => boolean;
  /** The server's max_payload, when known. */
  maxPayload: () => number | undefined;
}

/** Parallel claim queries per loop iteration (each on its own pool connection, over disjoint lanes). */
const CLAIMERS = 2;
/**
 * Event data bytes held at most (claimed, not yet acknowledged), besides the
 * `maxInFlight` row count: rows alone do not bound memory when payloads are
 * large (2,000 rows of 1 MB took 2.5 GB of RSS; bench/scenarios/relay-memory.ts).
 * Claims are sized by a running estimate of the bytes per row, starting from
 * the server's max_payload.
 */
export const MAX_IN_FLIGHT_BYTES = 64 * 1024 * 1024;

/**
 * Drops from a claimed batch the rows that follow a retried row of their key:
 * they are sent after the retry's outcome is known (the key is left out of
 * claims while its retry is in flight), never pipelined behind it.
 */
export function holdBehindRetries(rows: ClaimedRow[]): ClaimedRow[] {
  const retrying = new Set<string>();
  return rows.filter((row) => {
    if (retrying.has(row.key)) return false;
    if (row.attempts > 0) retrying.add(row.key);
    return true;
  });
}

/** Tries a statement a few times (a terminated pool connection is replaced by the next attempt). */
async function withRetries<T>(what: string, logger: Logger, fn: () => Promise<T>, attempts = 5): Promise<T> {
  let last: unknown;
  for (let i = 0; i < attempts; i++) {
    try {
      return await fn();
    } catch (err) {
      last = err;
      logger.debug({ err, attempt: i + 1 }, `${what} failed, retrying`);
      await sleep(Math.min(2000, 50 * 2 ** i) * Math.random());
    }
  }
  throw last;
}

/**
 * The publishing loop of one relay instance. It claims due rows of the leased
 * lanes, publishes them pipelined on the one NATS connection, and marks the
 * acknowledged ones published in one statement per batch. Batches overlap
 * (up to `maxInFlight` rows): the next claim leaves out the rows in flight,
 * and a key's later rows may follow its in-flight rows on the wire (publish
 * order on one connection is stream order), except behind a retry: a key with
 * a retried row in flight sends nothing more until that row's outcome is known.
 */
export class Dispatcher {
  readonly #d: DispatcherDeps;
  readonly #claimSql: string;
  readonly #markPublishedSql: string;
  readonly #markFailedSql: string;
  /** Seqs in flight, per lane. */
  readonly #inflightSeqs = new Map<number, Set<string>>();
  /** Keys with a retry in flight: their later rows wait for its outcome instead of being pipelined behind it. */
  readonly #retryingKeys = new Map<string, number>();
  readonly #inflightLanes = new Map<number, number>();
  readonly #batches = new Set<Promise<void>>();
  #inflightRows = 0;
  #inflightBytes = 0;
  /** Running estimate of data bytes per claimed row (undefined before the first claim). */
  #rowBytes: number | undefined;
  #running = false;
  #loop: Promise<void> | undefined;
  #wake: (() => void) | undefined;
  #woken = false;
  #laneRotation = 0;
  #lastTick = 0;
  #idleDelayMs: number;
  #dbDown = false;
  #openedAt = 0;

  constructor(deps: DispatcherDeps) {
    this.#d = deps;
    this.#claimSql = claimBatchSql(deps.schemaSql);
    this.#markPublishedSql = markPublishedSql(deps.schemaSql);
    this.#markFailedSql = markFailedSql(deps.schemaSql);
    this.#idleDelayMs = deps.options.pollIntervalMs;
    deps.breaker.onBreak(() => {
      this.#openedAt = Date.now();
    });
  }

  get inflightRows(): number {
    return this.#inflightRows;
  }

  /** Lanes with rows in flight: the leaser must not release them. */
  busy = (lane: number): boolean => (this.#inflightLanes.get(lane) ?? 0) > 0;

  /** A hint that there may be new rows (NOTIFY, a reconnect): poll now. */
  wake(): void {
    this.#woken = true;
    this.#idleDelayMs = 0;
    this.#wake?.();
  }

  start(): void {
    if (this.#running) return;
    this.#running = true;
    this.#loop = this.#run();
  }

  /** Stops claiming, then waits for every in-flight batch to be acknowledged and marked. */
  async stop(): Promise<void> {
    this.#running = false;
    this.#wake?.();
    await this.#loop;
    while (this.#batches.size > 0) await Promise.allSettled([...this.#batches]);
  }

  async #pause(ms: number): Promise<void> {
    if (this.#woken || !this.#running) {
      this.#woken = false;
      return;
    }
    await new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.#wake = done;
    });
    this.#wake = undefined;
    this.#woken = false;
  }

  async #run(): Promise<void> {
    const o = this.#d.options;
    while (this.#running) {
      const now = Date.now();
      if (now - this.#lastTick >= o.pollIntervalMs || this.#d.leaser.lanes.length === 0) {
        this.#lastTick = now;
        const lanes = await this.#d.leaser.tick(this.busy);
        this.#d.metrics.lanesOwned.set(lanes.length);
        if (!this.#running) break;
      }
      const lanes = this.#d.leaser.lanes;
      const state = this.#d.breaker.state;
      // cockatiel moves from open to half-open only when called after the cool-down: until then, claim nothing.
      const coolingMs = state === CircuitState.Open ? this.#openedAt + o.breakerCooldownMs - Date.now() : 0;
      if (lanes.length === 0 || !this.#d.natsUp() || coolingMs > 0 || state === CircuitState.Isolated) {
        await this.#pause(coolingMs > 0 ? Math.min(o.pollIntervalMs, coolingMs) : o.pollIntervalMs);
        continue;
      }
      const probing = state !== CircuitState.Closed;
      const rowBytes = Math.max(64, this.#rowBytes ?? this.#d.maxPayload() ?? 1_048_576);
      const byteRoom = Math.floor((MAX_IN_FLIGHT_BYTES - this.#inflightBytes) / rowBytes);
      const capacity = Math.min(o.maxInFlight - this.#inflightRows, this.#inflightRows === 0 ? Math.max(1, byteRoom) : byteRoom);
      if (capacity <= 0 || (probing && this.#inflightRows > 0)) {
        await this.#pause(o.pollIntervalMs);
        continue;
      }
      // Claims for disjoint lane groups run in parallel, on separate pool connections: the claim
      // round trip, not NATS, is what bounds a single claim loop.
      const groups = probing ? [lanes] : this.#groups(lanes);
      const limit = probing ? 1 : Math.max(1, Math.min(o.batchSize, Math.floor(capacity / groups.length)));
      let claimed: ClaimedRow[][];
      try {
        claimed = await Promise.all(groups.map((g) => this.#claim(g, limit)));
        if (this.#dbDown) this.#d.logger.info({ event: 'database-restored' }, 'database answering again: claiming resumed');
        this.#dbDown = false;
      } catch (err) {
        if (!this.#dbDown) this.#d.logger.warn({ err }, 'claiming failed: the database does not answer; retrying every poll interval');
        this.#dbDown = true;
        await this.#pause(o.pollIntervalMs);
        continue;
      }
      for (const rows of claimed) if (rows.length > 0) this.#launch(holdBehindRetries(rows));
      this.#estimateRowBytes(claimed);
      const found = claimed.reduce((n, rows) => n + rows.length, 0);
      if (!probing && claimed.some((rows) => rows.length === limit)) {
        this.#idleDelayMs = 0;
        continue;
      }
      // Adaptive: right after finding rows, look again soon; each empty poll doubles the wait up to the poll interval.
      this.#idleDelayMs = found > 0 ? 5 : Math.min(o.pollIntervalMs, Math.max(5, this.#idleDelayMs * 2));
      await this.#pause(this.#idleDelayMs);
    }
  }

  /** The lanes split round-robin into up to CLAIMERS groups. */
  #groups(lanes: readonly number[]): number[][] {
    const n = Math.min(CLAIMERS, lanes.length);
    const groups: number[][] = Array.from({ length: n }, () => []);
    for (const [i, lane] of lanes.entries()) groups[i % n]?.push(lane);
    return groups;
  }

  async #claim(lanes: readonly number[], limit: number): Promise<ClaimedRow[]> {
    this.#laneRotation = (this.#laneRotation + 1) % 1024;
    const r = this.#laneRotation % lanes.length;
    const rotated = [...lanes.slice(r), ...lanes.slice(0, r)];
    const inflight: string[] = [];
    for (const lane of lanes) for (const seq of this.#inflightSeqs.get(lane) ?? []) inflight.push(seq);
    const { rows } = await this.#d.pool.query<ClaimedRow>(this.#claimSql, [rotated, inflight, [...this.#retryingKeys.keys()], limit]);
    return rows;
  }

  #estimateRowBytes(claimed: ClaimedRow[][]): void {
    let n = 0;
    let bytes = 0;
    for (const rows of claimed) {
      n += rows.length;
      for (const r of rows) bytes += r.data.byteLength;
    }
    if (n === 0) return;
    const avg = bytes / n;
    this.#rowBytes = this.#rowBytes === undefined ? avg : (this.#rowBytes + avg) / 2;
  }

  #launch(rows: ClaimedRow[]): void {
    let bytes = 0;
    for (const r of rows) {
      const seqs = this.#inflightSeqs.get(r.lane) ?? new Set<string>();
      this.#inflightSeqs.set(r.lane, seqs);
      seqs.add(r.seq);
      if (r.attempts > 0) this.#retryingKeys.set(r.key, (this.#retryingKeys.get(r.key) ?? 0) + 1);
      this.#inflightLanes.set(r.lane, (this.#inflightLanes.get(r.lane) ?? 0) + 1);
      bytes += r.data.byteLength;
    }
    this.#inflightRows += rows.length;
    this.#inflightBytes += bytes;
    const batch = this.#batch(rows)
      .catch((err) => this.#d.logger.error({ err, rows: rows.length }, 'batch failed unexpectedly; its rows will be claimed again'))
      .finally(() => {
        for (const r of rows) {
          const seqs = this.#inflightSeqs.get(r.lane);
          seqs?.delete(r.seq);
          if (seqs?.size === 0) this.#inflightSeqs.delete(r.lane);
          if (r.attempts > 0) {
            const k = (this.#retryingKeys.get(r.key) ?? 1) - 1;
            if (k === 0) this.#retryingKeys.delete(r.key);
            else this.#retryingKeys.set(r.key, k);
          }
          const l = (this.#inflightLanes.get(r.lane) ?? 1) - 1;
          if (l === 0) this.#inflightLanes.delete(r.lane);
          else this.#inflightLanes.set(r.lane, l);
        }
        this.#inflightRows -= rows.length;
        this.#inflightBytes -= bytes;
        this.#batches.delete(batch);
        // Capacity came back, or the keys of this batch may have more rows: look again.
        this.#wake?.();
      });
    this.#batches.add(batch);
  }

  async #batch(rows: ClaimedRow[]): Promise<void> {
    const started = performance.now();
    let outcomes: Outcome[];
    try {
      outcomes = await this.#d.breaker.execute(() => this.#publishAll(rows));
    } catch (err) {
      if (err instanceof BrokenCircuitError || err instanceof IsolatedCircuitError) return; // not sent; claimed again later
      if (err instanceof NatsUnavailableError) outcomes = (err.cause as Outcome[]) ?? [];
      else throw err;
    }
    this.#d.events.emit('relay:batch:acked', { rows: rows.length, acked: outcomes.filter((x) => x.ok).length });
    await this.#settle(rows, outcomes, started);
  }

  async #publishAll(rows: ClaimedRow[]): Promise<Outcome[]> {
    const { js, options } = this.#d;
    const maxPayload = this.#d.maxPayload();
    // A key whose row is refused before sending (too large) sends nothing more in this batch:
    // its later rows must not reach the stream ahead of it.
    const refusedKeys = new Set<string>();
    const pending = rows.map(async (row): Promise<Outcome> => {
      if (refusedKeys.has(row.key))
        return { ok: false, skipped: true, reason: 'other', permanent: false, transport: false, message: 'skipped' };
      try {
        const event = eventFromOutboxRow(row);
        const encoded = encodeEvent(event);
        const size = encodedSize(encoded);
        if (maxPayload !== undefined && size > maxPayload) {
          refusedKeys.add(row.key);
          return {
            ok: false,
            reason: 'max_payload',
            permanent: true,
            transport: false,
            message: `the event encodes to ${size} bytes, over the NATS server's max_payload of ${maxPayload}`,
          };
        }
        const h = natsHeaders();
        for (const [name, value] of encoded.headers) h.set(name, value);
        // A PubAck with duplicate: true means JetStream already holds this id: success as well.
        await js.publish(encoded.subject, encoded.body, { headers: h, timeout: options.publishTimeoutMs });
        return { ok: true, ackAt: Date.now() };
      } catch (err) {
        return { ok: false, ...classifyPublishError(err) };
      }
    });
    const outcomes = await Promise.all(pending);
    if (outcomes.length > 0 && outcomes.every((x) => !x.ok && x.transport)) {
      const first = outcomes[0] as { message: string };
      throw new NatsUnavailableError(`every publish of the batch failed: ${first.message}`, { cause: outcomes });
    }
    return outcomes;
  }

  async #settle(rows: ClaimedRow[], outcomes: Outcome[], started: number): Promise<void> {
    const { options: o, metrics, pool, logger, events } = this.#d;
    const published: string[] = [];
    const failed = { seqs: [] as string[], errors: [] as string[], delays: [] as number[], dead: [] as boolean[] };
    const failedKeys = new Set<string>();
    const deadRows: Array<{ row: ClaimedRow; outcome: Classified }> = [];
    rows.forEach((row, i) => {
      const outcome = outcomes[i];
      if (!outcome) return;
      if (outcome.ok) {
        // Already in the stream: mark it even when an earlier row of its key failed in this batch.
        published.push(row.seq);
        metrics.commitToAck.observe(Math.max(0, outcome.ackAt - row.created_at.getTime()) / 1000);
        return;
      }
      if (outcome.skipped) return;
      metrics.failures.inc({ reason: outcome.reason });
      // Only the first failure of a key counts; later rows of the key wait behind it untouched.
      if (failedKeys.has(row.key)) return;
      failedKeys.add(row.key);
      const attempt = row.attempts + 1;
      const dead = outcome.permanent || attempt >= o.maxAttempts;
      failed.seqs.push(row.seq);
      failed.errors.push(`${outcome.reason}: ${outcome.message}`);
      failed.delays.push(backoffDelayMs(attempt, o.backoffBaseMs, o.backoffMaxMs));
      failed.dead.push(dead);
      if (dead) deadRows.push({ row, outcome });
    });
    const marks: Promise<unknown>[] = [];
    if (published.length > 0) {
      marks.push(
        withRetries('marking published', logger, () => pool.query(this.#markPublishedSql, [published])).then(
          () => metrics.published.inc(published.length),
          (err) =>
            logger.error(
              { err, rows: published.length },
              'could not mark acknowledged rows published; they will be sent again and JetStream will drop the duplicates',
            ),
        ),
      );
    }
    if (failed.seqs.length > 0) {
      marks.push(
        withRetries('recording failures', logger, () =>
          pool.query(this.#markFailedSql, [failed.seqs, failed.errors, failed.delays, failed.dead]),
        ).catch((err) => logger.error({ err, rows: failed.seqs.length }, 'could not record failed attempts; the rows will be tried again')),
      );
    }
    await Promise.all(marks);
    for (const { row, outcome } of deadRows) {
      logger.error(
        { id: row.id, key: row.key, seq: row.seq, reason: outcome.reason, error: outcome.message },
        'event is dead: its key is blocked until ferry dlq retry or discard',
      );
      events.emit('relay:row:dead', { id: row.id, key: row.key, seq: row.seq, reason: outcome.reason, error: outcome.message });
    }
    const durationMs = performance.now() - started;
    metrics.batchDuration.observe(durationMs / 1000);
    events.emit('relay:batch:published', {
      rows: rows.length,
      published: published.length,
      failed: rows.length - published.length,
      durationMs,
    });
    if (rows.length > published.length) {
      logger.debug({ rows: rows.length, published: published.length }, 'batch had failures');
    }
  }
}
