// Over ~350 lines on purpose: the claim loop and the per-key chains share the in-flight key set and
// lanes, and are tuned together (docs/benchmarks.md). The rest is split by job: claim-plan.ts (chains,
// budget), chain-sender.ts (sends, lease check per row), row-settler.ts (marks and failure records).
import { namedStatement } from '@ferry/core';
import { type CircuitBreakerPolicy, CircuitState } from 'cockatiel';
import type pg from 'pg';
import type { Classified } from '../errors.js';
import { type ClaimedRow, claimBatchSql } from '../sql/claim-batch.js';
import { claimKeyRowsSql } from '../sql/claim-key-rows.js';
import type { CompiledRelayOptions, Logger } from '../types.js';
import { ChainSender } from './chain-sender.js';
import {
  type Acked,
  CLAIMERS,
  CONTINUE_AT,
  chainsByKey,
  claimFoundBacklog,
  InflightBudget,
  type LeasedRow,
  laneCursors,
  MAX_IN_FLIGHT_BYTES,
  type Outcome,
  WAKE_BELOW_KEYS,
} from './claim-plan.js';
import type { LaneLeaser } from './lane-leaser.js';
import type { RelayMetrics } from './metrics.js';
import type { PubAcks } from './pub-acks.js';
import type { RelayEmitter, RelayTestHooks } from './relay-emitter.js';
import { RowSettler } from './row-settler.js';
import { RunLoop } from './run-loop.js';
import type { WaitRecord } from './wait-record.js';

export interface DispatcherDeps {
  options: CompiledRelayOptions;
  schemaSql: string;
  pool: pg.Pool;
  /** JetStream publishing, PubAcks on one subscription. */
  acks: PubAcks;
  /** The subject of a chain about to be sent (the duplicate window watch). */
  sending?: (subject: string) => void;
  leaser: LaneLeaser;
  /** This instance's id: the owner name in its lease rows, which every mark names. */
  instance: string;
  breaker: CircuitBreakerPolicy;
  metrics: RelayMetrics;
  events: RelayEmitter;
  /** Fault-injection hooks of tests (`@ferry/relay/testing`); unset in production. */
  hooks?: RelayTestHooks;
  logger: Logger;
  /** Whether the NATS connection is up right now. */
  natsUp: () => boolean;
  /** The server's max_payload, when known. */
  maxPayload: () => number | undefined;
  /** This instance's wait record (with `listen`), and whether its LISTEN connection is up now. */
  waits?: { record: WaitRecord; listening: () => boolean };
}

/**
 * The publishing loop of one relay instance. It claims work by key from the
 * leased lanes (a key's rows from its first unpublished row on) and runs one
 * chain per key: a row is sent only after the previous row's PubAck, so the
 * stream never holds a key's version n+1 while version n may be missing.
 * The chains of many keys run at once on the one NATS connection; a long
 * chain fetches its key's next rows while it sends. Acknowledged rows of all
 * chains are marked published together (`Marker`). A failed row ends its
 * chain; its key is claimed again only when that row is due (backoff) or
 * settled by `ferry dlq`. Other keys are not slowed: a claim skips a blocked
 * key with one index probe.
 */
export { chainsByKey, claimFoundBacklog, MAX_IN_FLIGHT_BYTES } from './claim-plan.js';

export class Dispatcher {
  readonly #d: DispatcherDeps;
  // Named: node-postgres prepares each once per pool connection. An idle claim took 1.05 ms as
  // an unnamed statement and 0.42 ms prepared (planning a recursive CTE each time), and a
  // busy one (2,460 rows) no longer; the relay's pool is a direct or session-mode connection.
  readonly #claimSql: { name: string; text: string };
  readonly #keyRowsSql: { name: string; text: string };
  readonly #sender: ChainSender;
  readonly #settler: RowSettler;
  readonly #budget = new InflightBudget();
  /** Keys claimed and not yet settled: the next claims leave them out. */
  readonly #inflightKeys = new Set<string>();
  /** Per lane, the last key claimed: the next claim of the lane starts after it, so every key gets its turn. */
  readonly #cursors = new Map<number, string>();
  /** Chains running per lane: the leaser must not release these lanes. */
  readonly #inflightLanes = new Map<number, number>();
  readonly #chains = new Set<Promise<void>>();
  /** Keys in flight right after the last claim's chains started. */
  #keysAfterClaim = 0;
  /** The last claim found more rows waiting (claimFoundBacklog): a backlog, claimed by CLAIMERS statements at once. */
  #backlog = true;
  /** Claim rounds made: where the next round's walks start among their lanes. */
  #claims = 0;
  readonly #loop = new RunLoop();
  #wake: (() => void) | undefined;
  #woken = false;
  #idleDelayMs: number;
  #dbDown = false;
  #openedAt = 0;
  /** performance.now() when the claim in progress started (undefined between claims): see stuckMs(). */
  #claimingSince: number | undefined;
  /** The lanes of the last loop iteration, to forget the cursors of lanes lost. */
  #lanesSeen = '';

  constructor(deps: DispatcherDeps) {
    this.#d = deps;
    this.#claimSql = namedStatement('claim', claimBatchSql(deps.schemaSql));
    this.#keyRowsSql = namedStatement('key_rows', claimKeyRowsSql(deps.schemaSql));
    this.#sender = new ChainSender({ ...deps, holds: (row) => this.#holds(row) });
    this.#settler = new RowSettler(deps);
    this.#idleDelayMs = deps.options.pollIntervalMs;
    deps.breaker.onBreak(() => {
      this.#openedAt = Date.now();
    });
  }

  get inflightRows(): number {
    return this.#budget.rows;
  }

  /** How long the claim in progress has run (0 between claims): an instance stuck in one gives its lanes up. */
  stuckMs(): number {
    return this.#claimingSince === undefined ? 0 : performance.now() - this.#claimingSince;
  }

  /** Whether a row's lane is still held under the epoch it was claimed with, by this instance's own clock. */
  #holds(row: LeasedRow): boolean {
    return this.#d.leaser.epoch(row.lane) === row.epoch;
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
    this.#loop.start(() => this.#run());
  }

  /** Stops claiming, lets every chain finish the rows it is sending, and waits until they are marked. */
  async stop(): Promise<void> {
    await this.#loop.stop(() => this.#wake?.());
    while (this.#chains.size > 0) await Promise.allSettled([...this.#chains]);
    await this.#settler.drain();
    await this.#d.waits?.record.forget();
  }

  async #pause(ms: number): Promise<void> {
    if (this.#woken || !this.#loop.running) {
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
    while (this.#loop.running) {
      // The leases are renewed by the leaser's own timer; each iteration only reads what is held now.
      const lanes = this.#d.leaser.lanes;
      if (lanes.join() !== this.#lanesSeen) {
        this.#lanesSeen = lanes.join();
        this.#forgetCursors(lanes);
      }
      const state = this.#d.breaker.state;
      // cockatiel moves from open to half-open only when called after the cool-down: until then, claim nothing.
      const coolingMs = state === CircuitState.Open ? this.#openedAt + o.breakerCooldownMs - Date.now() : 0;
      if (lanes.length === 0 || !this.#d.natsUp() || coolingMs > 0 || state === CircuitState.Isolated) {
        // Nothing would be claimed on a wake-up: publishers should not NOTIFY meanwhile (during an outage, every commit).
        this.#d.waits?.record.busy(true);
        await this.#pause(coolingMs > 0 ? Math.min(o.pollIntervalMs, coolingMs) : o.pollIntervalMs);
        continue;
      }
      const probing = state !== CircuitState.Closed;
      const rowBytes = Math.max(64, this.#budget.rowBytes ?? this.#d.maxPayload() ?? 1_048_576);
      const byteRoom = Math.floor((MAX_IN_FLIGHT_BYTES - this.#budget.bytes) / rowBytes);
      const capacity = Math.min(o.maxInFlight - this.#budget.rows, this.#budget.rows === 0 ? Math.max(1, byteRoom) : byteRoom);
      if (capacity <= 0 || (probing && this.#budget.rows > 0)) {
        await this.#pause(o.pollIntervalMs);
        continue;
      }
      // With a backlog, claims for disjoint lane groups run in parallel, on separate pool connections:
      // the claim round trip, not NATS, is what bounds a single claim loop.
      const groups = probing || !this.#backlog ? [lanes] : this.#groups(lanes);
      // Up to batchSize keys per claim; the room for rows is shared among the keys found, so a
      // few keys get long chains (one hot key keeps its pipe full) and many keys a row or two each.
      const limit = probing ? 1 : Math.max(1, Math.min(o.batchSize, Math.floor(capacity / groups.length)));
      const room = probing ? 1 : Math.max(1, Math.floor(capacity / groups.length));
      let claimed: LeasedRow[][];
      try {
        const turn = this.#claims++;
        this.#claimingSince = performance.now();
        // The byte budget left is shared by the parallel claims too: each could otherwise load all of it.
        const bytes = Math.floor(this.#budget.byteRoom() / groups.length);
        claimed = await Promise.all(groups.map((g) => this.#claim(g, limit, room, bytes, turn)));
        if (this.#dbDown) this.#d.logger.info({ event: 'database-restored' }, 'database answering again: claiming resumed');
        this.#dbDown = false;
      } catch (err) {
        if (!this.#dbDown) this.#d.logger.warn({ err }, 'claiming failed: the database does not answer; retrying every poll interval');
        this.#dbDown = true;
        await this.#pause(o.pollIntervalMs);
        continue;
      } finally {
        this.#claimingSince = undefined;
      }
      for (const rows of claimed) if (rows.length > 0) this.#launch(rows);
      this.#keysAfterClaim = this.#inflightKeys.size;
      this.#budget.estimateRowBytes(claimed);
      const found = claimed.reduce((n, rows) => n + rows.length, 0);
      // Found nothing and sends nothing: ask publishers for a NOTIFY at commit. A publish that ran
      // before the record was written sent none and may commit just after this poll, so a new record
      // is followed by a poll 5 ms later. Found rows, or chains still sending (an ending chain wakes
      // the loop, or the 5 ms poll below finds its key): the next poll is near, and once that has
      // lasted a while (a backlog) publishers stop notifying (WAIT_KEPT_WHILE_BUSY_MS).
      const waits = this.#d.waits;
      let recorded = false;
      if (!waits?.listening()) waits?.record.busy(true);
      else if (found === 0 && this.#budget.rows === 0) recorded = await waits.record.idle();
      else waits.record.busy();
      this.#backlog = !probing && claimed.some((rows) => claimFoundBacklog(rows, limit, room));
      if (this.#backlog) {
        this.#idleDelayMs = 0;
        continue;
      }
      // Adaptive: right after finding rows, look again soon; each empty poll doubles the wait up to the poll interval.
      // Keys still in flight: poll again within 5 ms (a chain that ends may not wake the loop, see WAKE_BELOW_KEYS).
      this.#idleDelayMs =
        found > 0 || recorded || this.#inflightKeys.size > 0 ? 5 : Math.min(o.pollIntervalMs, Math.max(5, this.#idleDelayMs * 2));
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

  async #claim(group: readonly number[], keyLimit: number, room: number, bytes: number, turn: number): Promise<LeasedRow[]> {
    // The walk takes each lane's next key in the order of $1: with fewer keys allowed than lanes
    // with work (a full in-flight budget, large payloads), the first lanes would win every claim.
    // Each claim starts one lane further on, so every lane gets its turn at the front.
    const start = turn % group.length;
    const lanes = [...group.slice(start), ...group.slice(0, start)];
    const afters = lanes.map((lane) => this.#cursors.get(lane) ?? '');
    // The epochs before the claim: a lane lost or taken again meanwhile has another one, and its rows are dropped below.
    const epochs = new Map(lanes.map((lane) => [lane, this.#d.leaser.epoch(lane)]));
    this.#d.metrics.claims.inc();
    const { rows } = await this.#d.pool.query<LeasedRow>({
      ...this.#claimSql,
      values: [
        lanes,
        afters,
        [...this.#inflightKeys],
        keyLimit,
        room,
        this.#budget.loadableBytes(this.#d.maxPayload()),
        bytes,
        this.#d.instance,
      ],
    });
    const held: LeasedRow[] = [];
    for (const r of rows) {
      const epoch = epochs.get(r.lane);
      if (epoch === undefined) continue;
      r.epoch = epoch;
      if (!this.#holds(r)) continue;
      held.push(r);
    }
    for (const [lane, key] of laneCursors(held)) this.#cursors.set(lane, key);
    return held;
  }

  /** Forgets the cursors of lanes no longer leased (a lane leased again starts from its first key). */
  #forgetCursors(lanes: readonly number[]): void {
    for (const lane of this.#cursors.keys()) if (!lanes.includes(lane)) this.#cursors.delete(lane);
  }

  #launch(claimed: LeasedRow[]): void {
    for (const chain of chainsByKey(claimed) as LeasedRow[][]) {
      const head = chain[0];
      if (head === undefined) continue;
      const { key, lane } = head;
      this.#d.sending?.(head.subject);
      this.#inflightKeys.add(key);
      // The lane stays busy (leased) until the chain's rows are marked: no other instance re-sends them meanwhile.
      this.#inflightLanes.set(lane, (this.#inflightLanes.get(lane) ?? 0) + 1);
      this.#budget.hold(chain);
      const run = this.#runChain(chain)
        .catch((err) => this.#d.logger.error({ err, key }, 'chain failed unexpectedly; its rows will be claimed again'))
        .finally(() => {
          this.#inflightKeys.delete(key);
          const l = (this.#inflightLanes.get(lane) ?? 1) - 1;
          if (l === 0) this.#inflightLanes.delete(lane);
          else this.#inflightLanes.set(lane, l);
          this.#chains.delete(run);
          // Capacity came back, and the key may have more rows: look again (at once unless many keys are still in flight).
          const keys = this.#inflightKeys.size;
          if (keys < WAKE_BELOW_KEYS || keys <= this.#keysAfterClaim / 2) this.#wake?.();
        });
      this.#chains.add(run);
    }
  }

  /**
   * One key's chain: its rows in seq order, each sent after the previous
   * one's PubAck, segment after segment while the key has due rows (long
   * chains only; a short one ends and the key waits for the next claim). The
   * key is released (by the caller) only once its acknowledged rows are
   * marked and its failure, if any, recorded: the next claim then starts from
   * the right row.
   */
  async #runChain(first: LeasedRow[]): Promise<void> {
    const started = performance.now();
    const marks: Promise<void>[] = [];
    let failure: { row: LeasedRow; outcome: Classified } | undefined;
    let segment = first;
    while (segment.length > 0) {
      const next = this.#loop.running && segment.length >= CONTINUE_AT ? this.#nextRows(segment) : undefined;
      let outcomes: Map<ClaimedRow, Outcome>;
      try {
        outcomes = await this.#sender.send(segment);
      } catch (err) {
        // Nothing else is expected to throw here; the rows stop counting as in flight either way.
        this.#budget.release(segment);
        if (next) this.#budget.release(await next);
        throw err;
      }
      const acked: Acked[] = [];
      for (const row of segment) {
        const x = outcomes.get(row);
        if (!x) break;
        if (x.ok) {
          acked.push({ seq: row.seq, epoch: row.epoch, lane: row.lane });
          // A hand-written created_at of ±infinity must not make the histogram's sum infinite for good.
          if (Number.isFinite(row.created_ms)) this.#d.metrics.commitToAck.observe(Math.max(0, x.ackAt - row.created_ms) / 1000);
        } else failure = { row, outcome: x };
      }
      this.#budget.release(segment);
      if (acked.length > 0) {
        this.#d.hooks?.afterAck?.(segment.length, acked.length);
        marks.push(this.#settler.mark(acked));
      }
      if (acked.length < segment.length || !this.#loop.running) {
        if (next) this.#budget.release(await next);
        break;
      }
      segment = next ? await next : [];
    }
    await Promise.all(marks);
    if (failure) await this.#settler.recordFailure(failure.row, failure.outcome);
    this.#d.metrics.batchDuration.observe((performance.now() - started) / 1000);
  }

  /** The key's due rows after `segment`, as many again, held as in flight; none when the byte budget is spent or the lane is lost. */
  async #nextRows(segment: readonly LeasedRow[]): Promise<LeasedRow[]> {
    const last = segment.at(-1) as LeasedRow;
    if (!this.#holds(last) || !this.#d.leaser.keeps(last.lane)) return [];
    const bytes = segment.reduce((n, r) => n + r.row_bytes, 0);
    if (this.#budget.bytes + bytes > MAX_IN_FLIGHT_BYTES) return [];
    try {
      const { rows } = await this.#d.pool.query<ClaimedRow>({
        ...this.#keyRowsSql,
        values: [
          last.lane,
          last.key,
          last.seq,
          segment.length,
          this.#budget.loadableBytes(this.#d.maxPayload()),
          this.#budget.byteRoom() - bytes,
          this.#d.instance,
        ],
      });
      const due = (chainsByKey(rows)[0] ?? []) as LeasedRow[];
      for (const r of due) r.epoch = last.epoch;
      this.#budget.hold(due);
      return due;
    } catch (err) {
      this.#d.logger.debug({ err, key: last.key }, 'fetching the next rows of a chain failed; the next claim takes them');
      return [];
    }
  }
}
