// Over ~350 lines on purpose: the claim loop, the per-key send chains and their marking share the
// in-flight budget (rows and bytes) and the key set, and are being tuned together (docs/benchmarks.md);
// the statements are in sql/, the marking batcher in marker.ts, the span in send-span.ts.
import { backoffDelayMs, encodedSize, encodeEvent, eventFromOutboxRow, LIMITS, namedStatement } from '@ferry/core';
import { headers as natsHeaders } from '@nats-io/transport-node';
import {
  BrokenCircuitError,
  type CircuitBreakerPolicy,
  CircuitState,
  ExponentialBackoff,
  fullJitterGenerator,
  handleAll,
  IsolatedCircuitError,
  retry,
} from 'cockatiel';
import type pg from 'pg';
import { type Classified, classifyPublishError, NatsUnavailableError } from './errors.js';
import type { LaneLeaser } from './lane-leaser.js';
import { Marker } from './marker.js';
import type { RelayMetrics } from './metrics.js';
import type { PubAcks } from './pub-acks.js';
import type { RelayEmitter, RelayTestHooks } from './relay-emitter.js';
import { SendSpan } from './send-span.js';
import { type ClaimedRow, claimBatchSql } from './sql/claim-batch.js';
import { claimKeyRowsSql } from './sql/claim-key-rows.js';
import { markFailedSql } from './sql/mark-failed.js';
import { markPublishedSql } from './sql/mark-published.js';
import type { CompiledRelayOptions, Logger } from './types.js';
import type { WaitRecord } from './wait-record.js';

type Outcome = { ok: true; ackAt: number } | ({ ok: false } & Classified);

/** A claimed row with the epoch its lane was held under when it was claimed: its mark or failure record carries it. */
type LeasedRow = ClaimedRow & { epoch: string };
/** A row to mark published: its seq and its lease epoch. */
type Acked = { seq: string; epoch: string };

export interface DispatcherDeps {
  options: CompiledRelayOptions;
  schemaSql: string;
  pool: pg.Pool;
  /** JetStream publishing, PubAcks on one subscription. */
  acks: PubAcks;
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
 * A chain at least this long fetches its key's next rows while it sends, and
 * goes on with them without a new claim: a hot key's PubAck round trips, not
 * the claim and the mark, set its pace.
 */
const CONTINUE_AT = 32;
/**
 * A chain that ends wakes the claim loop at once while fewer keys than this
 * are in flight. With more, a claim walks every pending key of its lanes
 * (in-flight keys included: they are skipped only after the walk) and frees
 * little, so the loop waits until half the keys claimed are released or its
 * next poll, 5 ms later.
 */
const WAKE_BELOW_KEYS = 64;
/**
 * Parallel claim queries per loop iteration (each on its own pool connection,
 * over disjoint lanes) while there is a backlog: the last claim found more
 * rows waiting (claimFoundBacklog). Otherwise one claim covers every leased lane: under
 * a steady load below capacity a poll finds a transaction's rows or two, and
 * a second statement for them costs more than it saves (at 1,000 events/s,
 * half the relay's statements were claims, and a statement costs its
 * round trip's CPU on both sides whatever it finds).
 */
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

/** A statement's retries: 5 attempts, full-jitter exponential backoff from 50 ms, capped at 2 s. */
const STATEMENT_RETRY = retry(handleAll, {
  maxAttempts: 4,
  backoff: new ExponentialBackoff({ generator: fullJitterGenerator, initialDelay: 50, maxDelay: 2000 }),
});

/** Tries a statement a few times (a terminated pool connection is replaced by the next attempt). */
function withRetries<T>(what: string, logger: Logger, fn: () => Promise<T>): Promise<T> {
  return STATEMENT_RETRY.execute(async ({ attempt }) => {
    try {
      return await fn();
    } catch (err) {
      logger.debug({ err, attempt: attempt + 1 }, `${what} failed, retrying`);
      throw err;
    }
  });
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
export class Dispatcher {
  readonly #d: DispatcherDeps;
  // Named: node-postgres prepares each once per pool connection. An idle claim took 1.05 ms as
  // an unnamed statement and 0.42 ms prepared (planning a recursive CTE each time), and a
  // busy one (2,460 rows) no longer; the relay's pool is a direct or session-mode connection.
  readonly #claimSql: { name: string; text: string };
  readonly #markPublishedSql: { name: string; text: string };
  readonly #markFailedSql: string;
  readonly #keyRowsSql: { name: string; text: string };
  readonly #marker: Marker<Acked>;
  /** Keys claimed and not yet settled: the next claims leave them out. */
  readonly #inflightKeys = new Set<string>();
  /** Subjects that answered no responders since the last publish that succeeded (see #publishChain). */
  readonly #noResponders = new Set<string>();
  /** Per lane, the last key claimed: the next claim of the lane starts after it, so every key gets its turn. */
  readonly #cursors = new Map<number, string>();
  /** Chains running per lane: the leaser must not release these lanes. */
  readonly #inflightLanes = new Map<number, number>();
  readonly #chains = new Set<Promise<void>>();
  #inflightRows = 0;
  #inflightBytes = 0;
  /** Keys in flight right after the last claim's chains started. */
  #keysAfterClaim = 0;
  /** Running estimate of data bytes per claimed row (undefined before the first claim). */
  #rowBytes: number | undefined;
  /** The last claim found more rows waiting (claimFoundBacklog): a backlog, claimed by CLAIMERS statements at once. */
  #backlog = true;
  /** Claim rounds made: where the next round's walks start among their lanes. */
  #claims = 0;
  #running = false;
  #loop: Promise<void> | undefined;
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
    this.#markPublishedSql = namedStatement('mark', markPublishedSql(deps.schemaSql));
    this.#markFailedSql = markFailedSql(deps.schemaSql);
    this.#keyRowsSql = namedStatement('key_rows', claimKeyRowsSql(deps.schemaSql));
    this.#marker = new Marker<Acked>((rows) => this.#markPublished(rows));
    this.#idleDelayMs = deps.options.pollIntervalMs;
    deps.breaker.onBreak(() => {
      this.#openedAt = Date.now();
    });
  }

  get inflightRows(): number {
    return this.#inflightRows;
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
    if (this.#running) return;
    this.#running = true;
    this.#loop = this.#run();
  }

  /** Stops claiming, lets every chain finish the rows it is sending, and waits until they are marked. */
  async stop(): Promise<void> {
    this.#running = false;
    this.#wake?.();
    await this.#loop;
    while (this.#chains.size > 0) await Promise.allSettled([...this.#chains]);
    await this.#marker.drain();
    await this.#d.waits?.record.forget();
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
        this.#d.waits?.record.busy();
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
        claimed = await Promise.all(groups.map((g) => this.#claim(g, limit, room, turn)));
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
      this.#estimateRowBytes(claimed);
      const found = claimed.reduce((n, rows) => n + rows.length, 0);
      // Found nothing and sends nothing: ask publishers for a NOTIFY at commit. A publish that ran
      // before the record was written sent none and may commit just after this poll, so a new record
      // is followed by a poll 5 ms later. Found rows, or chains still sending (an ending chain wakes
      // the loop, or the 5 ms poll below finds its key): the next poll is near, no NOTIFY needed.
      const waits = this.#d.waits;
      let recorded = false;
      if (found === 0 && this.#inflightRows === 0 && waits?.listening()) recorded = await waits.record.idle();
      else waits?.record.busy();
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

  async #claim(group: readonly number[], keyLimit: number, room: number, turn: number): Promise<LeasedRow[]> {
    // The walk takes each lane's next key in the order of $1: with fewer keys allowed than lanes
    // with work (a full in-flight budget, large payloads), the first lanes would win every claim.
    // Each claim starts one lane further on, so every lane gets its turn at the front.
    const start = turn % group.length;
    const lanes = [...group.slice(start), ...group.slice(0, start)];
    const afters = lanes.map((lane) => this.#cursors.get(lane) ?? '');
    // The epochs before the claim: a lane lost or taken again meanwhile has another one, and its rows are dropped below.
    const epochs = new Map(lanes.map((lane) => [lane, this.#d.leaser.epoch(lane)]));
    const { rows } = await this.#d.pool.query<LeasedRow>({
      ...this.#claimSql,
      values: [lanes, afters, [...this.#inflightKeys], keyLimit, room, this.#loadableBytes(), this.#byteRoom()],
    });
    const held: LeasedRow[] = [];
    for (const r of rows) {
      const epoch = epochs.get(r.lane);
      if (epoch === undefined) continue;
      r.epoch = epoch;
      if (!this.#holds(r)) continue;
      this.#cursors.set(r.lane, r.cursor);
      held.push(r);
    }
    return held;
  }

  /**
   * The most data bytes a row may have to be loaded: the server's max_payload (a larger row can
   * never be sent), and never over 64 MiB whatever the server says. Larger rows are measured in
   * SQL, not loaded, and go dead (#publishOne).
   */
  #loadableBytes(): number {
    return Math.min(this.#d.maxPayload() ?? LIMITS.maxEventBytes, LIMITS.maxEventBytes);
  }

  /** Data bytes a claim may still load: the in-flight byte budget left (a claim always gets its first row). */
  #byteRoom(): number {
    return Math.max(0, MAX_IN_FLIGHT_BYTES - this.#inflightBytes);
  }

  /** Forgets the cursors of lanes no longer leased (a lane leased again starts from its first key). */
  #forgetCursors(lanes: readonly number[]): void {
    for (const lane of this.#cursors.keys()) if (!lanes.includes(lane)) this.#cursors.delete(lane);
  }

  #estimateRowBytes(claimed: ClaimedRow[][]): void {
    let n = 0;
    let bytes = 0;
    for (const rows of claimed) {
      n += rows.length;
      for (const r of rows) bytes += r.data?.byteLength ?? 0;
    }
    if (n === 0) return;
    const avg = bytes / n;
    this.#rowBytes = this.#rowBytes === undefined ? avg : (this.#rowBytes + avg) / 2;
  }

  #launch(claimed: LeasedRow[]): void {
    for (const chain of chainsByKey(claimed) as LeasedRow[][]) {
      const head = chain[0];
      if (head === undefined) continue;
      const { key, lane } = head;
      this.#inflightKeys.add(key);
      // The lane stays busy (leased) until the chain's rows are marked: no other instance re-sends them meanwhile.
      this.#inflightLanes.set(lane, (this.#inflightLanes.get(lane) ?? 0) + 1);
      this.#hold(chain);
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

  /** Counts rows as in flight (claimed, not yet sent or refused): they bound the next claims. */
  #hold(rows: readonly ClaimedRow[], sign = 1): void {
    for (const r of rows) this.#inflightBytes += sign * (r.data?.byteLength ?? 0);
    this.#inflightRows += sign * rows.length;
  }

  #release(rows: readonly ClaimedRow[]): void {
    this.#hold(rows, -1);
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
      const next = this.#running && segment.length >= CONTINUE_AT ? this.#nextRows(segment) : undefined;
      let outcomes: Map<ClaimedRow, Outcome>;
      try {
        outcomes = await this.#send(segment);
      } catch (err) {
        // Nothing else is expected to throw here; the rows stop counting as in flight either way.
        this.#release(segment);
        if (next) this.#release(await next);
        throw err;
      }
      const acked: Acked[] = [];
      for (const row of segment) {
        const x = outcomes.get(row);
        if (!x) break;
        if (x.ok) {
          acked.push({ seq: row.seq, epoch: row.epoch });
          this.#d.metrics.commitToAck.observe(Math.max(0, x.ackAt - row.created_at.getTime()) / 1000);
        } else failure = { row, outcome: x };
      }
      this.#release(segment);
      if (acked.length > 0) {
        this.#d.hooks?.afterAck?.(segment.length, acked.length);
        marks.push(this.#marker.mark(acked));
      }
      if (acked.length < segment.length || !this.#running) {
        if (next) this.#release(await next);
        break;
      }
      segment = next ? await next : [];
    }
    await Promise.all(marks);
    if (failure) await this.#recordFailure(failure.row, failure.outcome);
    this.#d.metrics.batchDuration.observe((performance.now() - started) / 1000);
  }

  /** The key's due rows after `segment`, as many again, held as in flight; none when the byte budget is spent or the lane is lost. */
  async #nextRows(segment: readonly LeasedRow[]): Promise<LeasedRow[]> {
    const last = segment.at(-1) as LeasedRow;
    if (!this.#holds(last) || !this.#d.leaser.keeps(last.lane)) return [];
    const bytes = segment.reduce((n, r) => n + (r.data?.byteLength ?? 0), 0);
    if (this.#inflightBytes + bytes > MAX_IN_FLIGHT_BYTES) return [];
    try {
      const { rows } = await this.#d.pool.query<ClaimedRow>({
        ...this.#keyRowsSql,
        values: [last.lane, last.key, last.seq, segment.length, this.#loadableBytes(), this.#byteRoom() - bytes],
      });
      const due = (chainsByKey(rows)[0] ?? []) as LeasedRow[];
      for (const r of due) r.epoch = last.epoch;
      this.#hold(due);
      return due;
    } catch (err) {
      this.#d.logger.debug({ err, key: last.key }, 'fetching the next rows of a chain failed; the next claim takes them');
      return [];
    }
  }

  /** Sends one segment of a chain through the circuit breaker; a row missing from the result was not sent. */
  async #send(segment: LeasedRow[]): Promise<Map<ClaimedRow, Outcome>> {
    try {
      return await this.#d.breaker.execute(() => this.#publishChain(segment));
    } catch (err) {
      if (err instanceof BrokenCircuitError || err instanceof IsolatedCircuitError) return new Map(); // claimed again later
      if (err instanceof NatsUnavailableError) return err.cause as Map<ClaimedRow, Outcome>;
      throw err;
    }
  }

  /**
   * Sends a chain's rows one after another: a row goes out only once the
   * previous row of its key is acknowledged, and a failure ends the chain
   * (the rest are not sent). So whatever happens to a row (refused here,
   * rejected by the server, PubAck timeout, a reconnect that loses or
   * re-sends what was on the wire), no later row of its key can reach the
   * stream before it.
   */
  async #publishChain(rows: readonly LeasedRow[]): Promise<Map<ClaimedRow, Outcome>> {
    const outcomes = new Map<ClaimedRow, Outcome>();
    for (const row of rows) {
      // Fencing by the clock, before every send: JetStream cannot check an epoch, so a lane lost
      // (a freeze, a partition) must stop the chain here. A row left out was not sent: the chain
      // ends without a failure, and the lane's new holder claims it.
      if (!this.#holds(row)) break;
      const outcome = await this.#publishOne(row);
      outcomes.set(row, outcome);
      if (!outcome.ok) break;
    }
    // The breaker counts a segment only when NATS itself failed the rows it was given: a timeout or a lost
    // connection, or no responders on two or more subjects since the last publish that succeeded
    // (JetStream itself is not answering). No responders on one subject is that subject's problem (no
    // stream binds it): its rows back off on their own and never pause the healthy keys.
    let answered = false;
    let first: Outcome | undefined;
    for (const [row, x] of outcomes) {
      if (x.ok) this.#noResponders.clear();
      if (x.ok || (!x.transport && x.reason !== 'no_responders')) answered = true;
      else if (x.reason === 'no_responders') this.#noResponders.add(row.subject);
      else first ??= x;
    }
    if (!answered && this.#noResponders.size >= 2) first ??= [...outcomes.values()].find((x) => !x.ok);
    if (!answered && first && !first.ok) {
      throw new NatsUnavailableError(`publishing failed: ${first.message}`, { cause: outcomes });
    }
    return outcomes;
  }

  async #publishOne(row: ClaimedRow): Promise<Outcome> {
    const maxPayload = this.#d.maxPayload();
    const span = SendSpan.start(row); // tracing: undefined unless an OpenTelemetry SDK records
    try {
      if (row.data === null) {
        // Measured in SQL and not loaded (claim-batch.ts): over max_payload, it can never be sent.
        const refused: Outcome = {
          ok: false,
          reason: 'max_payload',
          permanent: true,
          transport: false,
          message: `the event's data is ${row.data_bytes} bytes, over the NATS server's max_payload of ${this.#loadableBytes()}; the relay did not load it`,
        };
        span?.failed(refused);
        return refused;
      }
      const event = eventFromOutboxRow(row as ClaimedRow & { data: Buffer });
      const encoded = encodeEvent(span ? { ...event, headers: span.headers(event.headers) } : event);
      const size = encodedSize(encoded);
      if (maxPayload !== undefined && size > maxPayload) {
        const refused: Outcome = {
          ok: false,
          reason: 'max_payload',
          permanent: true,
          transport: false,
          message: `the event encodes to ${size} bytes, over the NATS server's max_payload of ${maxPayload}`,
        };
        span?.failed(refused);
        return refused;
      }
      const h = natsHeaders();
      for (const [name, value] of encoded.headers) h.set(name, value);
      // A PubAck with duplicate: true means JetStream already holds this id: success as well.
      const ack = await this.#d.acks.publish(encoded.subject, encoded.body, h);
      span?.acked(ack);
      return { ok: true, ackAt: Date.now() };
    } catch (err) {
      const failure = classifyPublishError(err);
      span?.failed(failure, err);
      return { ok: false, ...failure };
    }
  }

  /** The Marker's flush: one statement for every row acknowledged since the previous flush. */
  async #markPublished(acked: Acked[]): Promise<void> {
    const { pool, logger, metrics, events, instance } = this.#d;
    const started = performance.now();
    const seqs = acked.map((a) => a.seq);
    try {
      const r = await withRetries('marking published', logger, () =>
        pool.query({ ...this.#markPublishedSql, values: [seqs, acked.map((a) => a.epoch), instance] }),
      );
      const fenced = seqs.length - (r.rowCount ?? 0);
      if (fenced > 0) logger.debug({ fenced }, 'acknowledged rows of lanes lost meanwhile were left for their new holder');
      metrics.published.inc(seqs.length);
      events.emit('relay:batch:published', {
        rows: seqs.length,
        published: seqs.length,
        failed: 0,
        durationMs: performance.now() - started,
      });
    } catch (err) {
      logger.error(
        { err, rows: seqs.length },
        'could not mark acknowledged rows published; they will be sent again and JetStream will drop the duplicates',
      );
    }
  }

  /** A chain's failed row: backoff (or dead), and its key stays held behind it. */
  async #recordFailure(row: LeasedRow, outcome: Classified): Promise<void> {
    const { options: o, metrics, pool, logger, events, instance } = this.#d;
    metrics.failures.inc({ reason: outcome.reason });
    const attempt = row.attempts + 1;
    const dead = outcome.permanent || attempt >= o.maxAttempts;
    const error = `${outcome.reason}: ${outcome.message}`;
    const delay = backoffDelayMs(attempt, o.backoffBaseMs, o.backoffMaxMs);
    try {
      const r = await withRetries('recording a failure', logger, () =>
        pool.query(this.#markFailedSql, [[row.seq], [error], [delay], [dead], [row.epoch], instance]),
      );
      if (r.rowCount === 0) return; // fenced: the lane was lost, its new holder decides about the row
    } catch (err) {
      logger.error({ err, id: row.id }, 'could not record a failed attempt; the row will be tried again');
    }
    if (dead) {
      logger.error(
        { id: row.id, key: row.key, seq: row.seq, reason: outcome.reason, error: outcome.message },
        'event is dead: its key is blocked until ferry dlq retry or discard',
      );
      events.emit('relay:row:dead', { id: row.id, key: row.key, seq: row.seq, reason: outcome.reason, error: outcome.message });
    }
    events.emit('relay:batch:published', { rows: 1, published: 0, failed: 1, durationMs: 0 });
  }
}
