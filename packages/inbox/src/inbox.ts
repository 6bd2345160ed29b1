// One file for the inbox's one component (InboxImpl), over ~350 lines because the
// gate, the stream path, the early-version store (`sequential`) and the park worker
// share its private state (the scheduler, counts, the gate's transaction and the
// pg-boss handle); split apart they would pass all of it back and forth.
import {
  ConfigError,
  type ConnectionPool,
  DEFAULT_SCHEMA,
  decodeEvent,
  equalJitterMs,
  type FerryEvent,
  type MigrateResult,
  MigrationError,
  migrate,
  type PooledConnection,
  pgBossDb,
  protectPool,
  type Queryable,
  quoteIdentifier,
  schemaIdentifier,
  startPgBoss,
  validateIdentifier,
  validateKey,
  WIRE_HEADERS,
  withTransaction,
} from '@ferry/core';
import {
  AckPolicy,
  type ConsumerConfig,
  type ConsumerInfo,
  type ConsumerMessages,
  DeliverPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  type JsMsg,
  jetstream,
  jetstreamManager,
} from '@nats-io/jetstream';
import { type Job, PgBoss } from 'pg-boss';
import { ConsumerMismatchError, PoisonMessageError } from './errors.js';
import { KeyScheduler } from './key-scheduler.js';
import { InboxMetrics, startLagSampler } from './metrics.js';
import { type CompiledInboxOptions, compileInboxOptions, parkQueueName, pruneQueueName } from './options.js';
import { decodeParked, isParkedJobData, type ParkedJobData, parkKey } from './parked-job.js';
import {
  deleteEarly,
  deleteEarlySql,
  failEarly,
  findEarlyWork,
  holdEarlyAndCommit,
  lockFirstEarly,
  type ReadyEarly,
  readyEarlyRun,
} from './sql/early-statements.js';
import { beginAndRecordMessage, beginGate, readKeyRow } from './sql/gate-statements.js';
import { inboxTablesExist } from './sql/inbox-tables.js';
import { lockKey } from './sql/lock-key.js';
import { addParked } from './sql/park-count.js';
import { pruneMessages } from './sql/prune-messages.js';
import { inProcessSpan, markOutcome } from './tracing.js';
import type {
  EventMap,
  Handler,
  HandlerContext,
  Inbox,
  InboxCounts,
  InboxEvent,
  InboxOptions,
  InboxReport,
  InboxState,
  ParkReason,
  TxBoss,
} from './types.js';

type GateOutcome =
  | { kind: 'applied'; durationMs: number }
  | { kind: 'held'; recorded: bigint }
  | { kind: 'stale'; recorded: bigint }
  | { kind: 'duplicate' }
  | { kind: 'gap'; recorded: bigint }
  | { kind: 'park'; reason: ParkReason; error: string };

/** A stored early version sent to the parking lot. */
interface MovedEarly {
  id: string | undefined;
  key: string;
  version: bigint;
  reason: ParkReason;
  error: string;
  jobId: string | null;
}

interface GateOptions {
  /** Runs in the transaction before COMMIT on applied, stale and duplicate outcomes (the park worker completes its job there). */
  beforeCommit?: (tx: PooledConnection) => Promise<void>;
  /** SQL sent with COMMIT in one round trip on the same outcomes (the drain deletes the stored version). */
  commitWith?: string;
  /** `sequential`, from the stream: the message to store in `inbox_early` if it is early (outcome `held`); built only then. */
  early?: () => ParkedJobData;
}

const JSON_TYPE = /^application\/([\w.+-]+\+)?json\s*(;.*)?$/i;
const NANOS_PER_MS = 1_000_000;
/** How often the dedupe window is pruned. */
const PRUNE_CRON = '*/15 * * * *';
/** Gap bookkeeping entries kept per process before the oldest are dropped. */
const MAX_TRACKED = 100_000;
/** Keys with stored early versions the sweep hands out per round. */
const SWEEP_BATCH = 100;
/** Stored versions read per round trip while draining a key. */
const DRAIN_BATCH = 100;

function errorText(err: unknown): string {
  if (err instanceof Error) return `${err.name}: ${err.message}`;
  return String(err);
}

/** Every report also counts in the metrics and sets the outcome on its process span (tracing.ts), before the caller's hook. */
function observed(onEvent: (report: InboxReport) => void, metrics: InboxMetrics | undefined): (report: InboxReport) => void {
  return (report) => {
    metrics?.observe(report);
    markOutcome(report);
    onEvent(report);
  };
}

class InboxImpl implements Inbox {
  readonly #o: CompiledInboxOptions;
  /** The quoted schema, escaped once. */
  readonly #s: string;
  readonly parkQueue: string;
  #state: InboxState = 'idle';
  #starting: Promise<void> | undefined;
  #stopping: Promise<void> | undefined;
  #boss: PgBoss | undefined;
  #ownBoss = false;
  #messages: ConsumerMessages | undefined;
  #loop: Promise<void> | undefined;
  readonly #scheduler: KeyScheduler;
  readonly #counts: InboxCounts = { applied: 0, stale: 0, duplicate: 0, gap: 0, failed: 0, parked: 0 };
  /** Per stream sequence: when a gap was first seen, and how many deliveries were gap waits (not failures). */
  readonly #tracked = new Map<number, { firstSeenMs: number; gapNaks: number }>();
  readonly #workerIds: string[] = [];
  /** `sequential`: keys this process stored early versions of, so applying their predecessor looks for them at once. */
  readonly #earlyKeys = new Set<string>();
  /** Keys with an early-version drain or flush queued in the scheduler (not queued twice). */
  readonly #earlyQueued = new Set<string>();
  #sweepTimer: NodeJS.Timeout | undefined;
  #sweeping: Promise<void> | undefined;
  readonly #metrics: InboxMetrics | undefined;
  #stopLagSampler: (() => void) | undefined;

  constructor(options: CompiledInboxOptions) {
    this.#s = quoteIdentifier(options.schema);
    this.parkQueue = parkQueueName(options.consumer);
    this.#scheduler = new KeyScheduler(options.concurrency, (err) => this.#o.logger.error({ err }, 'inbox task failed unexpectedly'));
    this.#metrics = options.metrics ? new InboxMetrics(options.metrics, options.consumer, () => this.#scheduler.size) : undefined;
    this.#o = Object.freeze({ ...options, onEvent: observed(options.onEvent, this.#metrics) });
  }

  get consumer(): string {
    return this.#o.consumer;
  }

  get state(): InboxState {
    return this.#state;
  }

  counts(): Readonly<InboxCounts> {
    return { ...this.#counts };
  }

  inFlight(): number {
    return this.#scheduler.size;
  }

  start(): Promise<void> {
    if (this.#stopping) return Promise.reject(new ConfigError('start', 'this inbox was stopped; create a new one'));
    this.#starting ??= this.#start().catch((err) => {
      this.#state = 'failed';
      throw err;
    });
    return this.#starting;
  }

  async #start(): Promise<void> {
    this.#state = 'starting';
    const o = this.#o;
    protectPool(o.pool);
    if (!(await inboxTablesExist(o.pool, o.schema))) {
      throw new MigrationError(
        `schema "${o.schema}" has no inbox tables: run \`ferry migrate --inbox --schema ${o.schema}\` (or migrateInbox({ pool, schema: '${o.schema}' })) on the consumer's database, or pass createInbox({ schema }) the schema you migrated`,
      );
    }
    await this.#ensureConsumer();
    await this.#startBoss();
    const js = jetstream(o.nc);
    const consumer = await js.consumers.get(o.stream, o.consumer);
    // Pull requests expire after 10 s (nats.js: 30 s), so heartbeats come every
    // 5 s and a consumer whose server or stream leader died pulls again within
    // about 10 s instead of 30 s; an idle consumer sends one pull per 10 s.
    this.#messages = await consumer.consume({ max_messages: Math.min(o.maxAckPending, 256), expires: 10_000 });
    this.#loop = this.#consumeLoop(this.#messages);
    if (this.#metrics) {
      const jsm = await jetstreamManager(o.nc, { checkAPI: false });
      this.#stopLagSampler = startLagSampler(
        this.#metrics,
        () => jsm.consumers.info(o.stream, o.consumer),
        o.lagSampleIntervalMs,
        o.logger,
      );
    }
    if (o.mode === 'sequential' && o.gapTimeoutMs > 0) {
      // Stored early versions are looked at every quarter of the gap timeout, at least every second.
      const every = Math.min(1_000, Math.max(100, Math.floor(o.gapTimeoutMs / 4)));
      this.#sweepTimer = setInterval(() => {
        this.#sweeping ??= this.#sweepEarly().finally(() => {
          this.#sweeping = undefined;
        });
      }, every);
    }
    this.#state = 'running';
    o.logger.info({ stream: o.stream, consumer: o.consumer, mode: o.mode }, 'inbox started');
  }

  stop(): Promise<void> {
    this.#stopping ??= this.#stop();
    return this.#stopping;
  }

  async #stop(): Promise<void> {
    if (this.#starting) await this.#starting.catch(() => {});
    this.#state = 'draining';
    const errors: unknown[] = [];
    const step = async (what: string, fn: () => Promise<unknown> | unknown) => {
      try {
        await fn();
      } catch (err) {
        errors.push(err);
        this.#o.logger.warn({ err }, `inbox stop: ${what} failed`);
      }
    };
    // Stop intake: the iterator yields what it already buffered (naked below), then ends.
    clearInterval(this.#sweepTimer);
    this.#stopLagSampler?.();
    await step('stop consuming', () => this.#messages?.stop());
    await step('early-version sweep', () => this.#sweeping);
    await step('consume loop', () => this.#loop);
    await step('drain in-flight', () => this.#scheduler.idle());
    const boss = this.#boss;
    if (boss) {
      if (this.#ownBoss) await step('stop pg-boss', () => boss.stop({ graceful: true, close: false, timeout: this.#o.ackWaitMs }));
      else for (const id of this.#workerIds) await step('stop park worker', () => boss.offWork(this.parkQueue, { id, wait: true }));
    }
    await step('flush acks', () => this.#o.nc.flush());
    this.#state = errors.length > 0 ? 'failed' : 'stopped';
    this.#o.logger.info({ consumer: this.#o.consumer, counts: this.#counts }, 'inbox stopped');
  }

  // ---- consumer management -------------------------------------------------------------------

  #desiredConfig(): Partial<ConsumerConfig> {
    const o = this.#o;
    return {
      durable_name: o.consumer,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      ack_wait: o.ackWaitMs * NANOS_PER_MS,
      // Ferry counts deliveries and parks at maxDeliver itself; a server-side limit would drop a
      // message silently when parking it failed (database down), so the server never gives up.
      max_deliver: -1,
      max_ack_pending: o.maxAckPending,
      ...(o.filterSubject === undefined ? {} : { filter_subject: o.filterSubject }),
    };
  }

  #differences(info: ConsumerInfo, strict: boolean): string[] {
    const o = this.#o;
    const c = info.config;
    const out: string[] = [];
    if (c.ack_policy !== AckPolicy.Explicit) out.push(`has ack_policy ${JSON.stringify(c.ack_policy)}, need "explicit"`);
    if (c.deliver_subject) out.push(`is a push consumer (deliver_subject ${JSON.stringify(c.deliver_subject)}), need a pull consumer`);
    const filter = c.filter_subject ?? undefined;
    if ((o.filterSubject ?? '') !== (filter ?? '')) {
      out.push(`has filter_subject ${JSON.stringify(filter ?? null)}, need ${JSON.stringify(o.filterSubject ?? null)}`);
    }
    if (c.ack_wait !== o.ackWaitMs * NANOS_PER_MS) out.push(`has ack_wait ${(c.ack_wait ?? 0) / NANOS_PER_MS} ms, need ${o.ackWaitMs} ms`);
    if (c.max_deliver !== undefined && c.max_deliver !== -1 && c.max_deliver <= o.maxDeliver) {
      out.push(`has max_deliver ${c.max_deliver}, need -1 or more than maxDeliver (${o.maxDeliver}) so the inbox can park`);
    }
    if (strict && c.max_ack_pending !== o.maxAckPending) out.push(`has max_ack_pending ${c.max_ack_pending}, need ${o.maxAckPending}`);
    if (strict && c.max_deliver !== -1) out.push(`has max_deliver ${c.max_deliver}, need -1`);
    return out;
  }

  async #ensureConsumer(): Promise<void> {
    const o = this.#o;
    const jsm = await jetstreamManager(o.nc);
    const notFound = (err: unknown, code: number) => err instanceof JetStreamApiError && err.code === code;
    let info: ConsumerInfo | undefined;
    try {
      info = await jsm.consumers.info(o.stream, o.consumer);
    } catch (err) {
      if (notFound(err, JetStreamApiCodes.StreamNotFound)) {
        throw new ConfigError(
          'stream',
          `JetStream stream ${JSON.stringify(o.stream)} does not exist; create it first (or run ferry doctor)`,
          {
            cause: err,
          },
        );
      }
      if (!notFound(err, JetStreamApiCodes.ConsumerNotFound)) throw err;
    }
    if (!o.manageConsumer) {
      if (!info) throw new ConsumerMismatchError(o.stream, o.consumer, ['does not exist']);
      const diffs = this.#differences(info, false);
      if (diffs.length > 0) throw new ConsumerMismatchError(o.stream, o.consumer, diffs);
      return;
    }
    const config = this.#desiredConfig();
    if (!info) {
      try {
        await jsm.consumers.add(o.stream, config);
        return;
      } catch (err) {
        // Another instance may have created it at the same moment with another config: fall through to update.
        info = await jsm.consumers.info(o.stream, o.consumer).catch(() => {
          throw err;
        });
      }
    }
    if (this.#differences(info, true).length > 0) {
      const { durable_name: _name, deliver_policy: _policy, ...update } = config;
      try {
        await jsm.consumers.update(o.stream, o.consumer, update);
      } catch (err) {
        throw new ConsumerMismatchError(
          o.stream,
          o.consumer,
          [...this.#differences(info, true), `and could not be updated (${errorText(err)})`],
          {
            cause: err,
          },
        );
      }
    }
  }

  // ---- pg-boss: parking lot and maintenance --------------------------------------------------

  async #startBoss(): Promise<void> {
    const o = this.#o;
    let boss = o.boss;
    if (!boss) {
      const own = new PgBoss({
        db: pgBossDb(o.pool),
        schema: o.bossSchema,
        schedule: o.mode === 'dedupe',
        supervise: true,
      });
      own.on('error', (err) => o.logger.error({ err }, 'inbox pg-boss error'));
      await startPgBoss(() => own.start());
      boss = own;
      this.#ownBoss = true;
    }
    this.#boss = boss;
    await boss.createQueue(this.parkQueue, {
      policy: 'key_strict_fifo',
      retryLimit: o.parkRetryLimit,
      retryDelay: Math.ceil(o.parkRetryDelayMs / 1000),
      retryBackoff: true,
      deleteAfterSeconds: 7 * 86_400,
    });
    this.#workerIds.push(
      await boss.work<ParkedJobData>(
        this.parkQueue,
        { pollingIntervalSeconds: o.parkPollIntervalMs / 1000, batchSize: 1, localConcurrency: 2 },
        async ([job]) => {
          if (job) await this.#retryParked(job);
        },
      ),
    );
    if (o.mode === 'dedupe') {
      const prune = pruneQueueName(o.consumer);
      await boss.createQueue(prune);
      await boss.schedule(prune, PRUNE_CRON, null, { singletonKey: o.consumer });
      this.#workerIds.push(
        await boss.work(prune, async () => {
          const n = await pruneMessages(o.pool, this.#s, o.consumer, o.dedupeRetentionMs);
          o.logger.info({ consumer: o.consumer, pruned: n }, 'inbox pruned dedupe window');
        }),
      );
    }
  }

  #txBoss(tx: Queryable): TxBoss {
    const boss = this.#boss;
    if (!boss) throw new ConfigError('boss', 'inbox is not started');
    return { send: (name, data, options) => boss.send(name, data ?? null, { ...options, db: pgBossDb(tx) }) };
  }

  // ---- the gate ------------------------------------------------------------------------------

  /** Why an event cannot reach a handler, or its payload. */
  #prepare(event: FerryEvent): { handler: Handler<string, unknown>; payload: unknown } | GateOutcome {
    const handler = this.#o.handlers.get(event.type);
    if (!handler) return { kind: 'park', reason: 'unknown-type', error: `no handler for event type ${JSON.stringify(event.type)}` };
    if (!JSON_TYPE.test(event.contentType)) return { handler, payload: event.data };
    try {
      return {
        handler,
        payload: JSON.parse(Buffer.from(event.data.buffer, event.data.byteOffset, event.data.byteLength).toString('utf8')),
      };
    } catch (err) {
      return { kind: 'park', reason: 'undecodable-body', error: `${event.contentType} body is not JSON: ${errorText(err)}` };
    }
  }

  /**
   * Version gate (which records the version and takes the row lock) → handler
   * → COMMIT, on a connection of its own. BEGIN travels with the gate, so an
   * applied message costs two round trips besides the handler's, as a plain
   * BEGIN/handler/COMMIT does; a stale or duplicate one costs two and writes
   * nothing. `park` and `gap` outcomes are rolled back (the gate's write, or in
   * `dedupe` mode the message id, is undone). `beforeCommit` runs in the
   * transaction before COMMIT on applied, stale and duplicate outcomes (the
   * park worker completes its job there).
   */
  async #gate(event: FerryEvent, attempt: number, fromPark: boolean, more: GateOptions = {}): Promise<GateOutcome> {
    const o = this.#o;
    const { beforeCommit, commitWith, early } = more;
    const gateStarted = performance.now();
    // BEGIN travels with the gate's first statement (`begin: null`).
    return withTransaction(
      o.pool,
      async (client, transaction) => {
        const end = async (sql: 'COMMIT' | 'ROLLBACK') => {
          if (sql === 'COMMIT' && beforeCommit) await beforeCommit(client);
          await transaction.end(sql === 'COMMIT' && commitWith ? `${commitWith}; COMMIT` : sql);
        };
        if (o.mode === 'dedupe') {
          if (!(await beginAndRecordMessage(client, this.#s, o.consumer, event.id))) {
            await end('COMMIT');
            return { kind: 'duplicate' };
          }
        } else {
          const won = await beginGate(client, this.#s, o.consumer, event.key, event.version, {
            sequential: o.mode === 'sequential',
            ignoreParked: fromPark,
          });
          if (!won && early && o.mode === 'sequential' && !fromPark) {
            // An early version is stored under the key's row lock and committed in the same round
            // trip, so the message can be acked (docs/inbox-modes.md).
            const row = await holdEarlyAndCommit(client, this.#s, o.consumer, event.key, event.version, early());
            transaction.ended();
            if (event.version <= row.version) {
              return event.version === row.version ? { kind: 'duplicate' } : { kind: 'stale', recorded: row.version };
            }
            if (row.held) return { kind: 'held', recorded: row.version };
            if (row.parked > 0) {
              return {
                kind: 'park',
                reason: 'behind-parked',
                error: `key ${JSON.stringify(event.key)} has ${row.parked} parked event(s) ahead of it`,
              };
            }
            return { kind: 'gap', recorded: row.version }; // its predecessor committed meanwhile: try again
          }
          if (!won) {
            // Nothing was written. Read why, ending the transaction in the same round trip unless the
            // park worker still has its own bookkeeping to commit.
            const rollbackNow = !beforeCommit;
            const row = await readKeyRow(client, this.#s, o.consumer, event.key, rollbackNow);
            if (rollbackNow) transaction.ended();
            if (event.version <= row.version) {
              if (transaction.open) await end('COMMIT');
              return event.version === row.version ? { kind: 'duplicate' } : { kind: 'stale', recorded: row.version };
            }
            if (transaction.open) await end('ROLLBACK');
            if (o.mode === 'sequential' && !fromPark && row.parked > 0) {
              return {
                kind: 'park',
                reason: 'behind-parked',
                error: `key ${JSON.stringify(event.key)} has ${row.parked} parked event(s) ahead of it`,
              };
            }
            if (o.mode === 'sequential') return { kind: 'gap', recorded: row.version };
            throw new Error(`version gate for key ${JSON.stringify(event.key)} v${event.version} lost to a concurrent writer; retrying`);
          }
        }
        const prepared = this.#prepare(event);
        if ('kind' in prepared) {
          await end('ROLLBACK');
          return prepared;
        }
        const started = performance.now();
        const inboxEvent: InboxEvent = { ...event, payload: prepared.payload };
        const ctx: HandlerContext = { tx: client, boss: this.#txBoss(client), consumer: o.consumer, attempt };
        await prepared.handler(inboxEvent, ctx);
        const handled = performance.now();
        await end('COMMIT');
        const committed = performance.now();
        this.#metrics?.handler(handled - started);
        this.#metrics?.gateToCommit(committed - gateStarted);
        return { kind: 'applied', durationMs: committed - started };
      },
      { begin: null },
    );
  }

  // ---- stream messages -----------------------------------------------------------------------

  async #consumeLoop(messages: ConsumerMessages): Promise<void> {
    try {
      for await (const m of messages) {
        if (this.#stopping) {
          m.nak();
          continue;
        }
        const key = m.headers?.get(WIRE_HEADERS.partitionKey) || `~seq/${m.info.streamSequence}`;
        const receivedAt = Date.now();
        this.#scheduler.push(key, () => this.#handleMessage(m, receivedAt));
      }
    } catch (err) {
      if (!this.#stopping) {
        this.#state = 'failed';
        this.#o.logger.error({ err, consumer: this.#o.consumer }, 'inbox stopped consuming');
      }
    }
  }

  #track(seq: number): { firstSeenMs: number; gapNaks: number } {
    let t = this.#tracked.get(seq);
    if (!t) {
      if (this.#tracked.size >= MAX_TRACKED) {
        const oldest = this.#tracked.keys().next().value;
        if (oldest !== undefined) this.#tracked.delete(oldest);
      }
      t = { firstSeenMs: Date.now(), gapNaks: 0 };
      this.#tracked.set(seq, t);
    }
    return t;
  }

  #backoffMs(attempt: number): number {
    const b = this.#o.backoffMs;
    const base = b[Math.min(attempt - 1, b.length - 1)] ?? 0;
    // Equal jitter (core's backoff.ts says why not full): retries of many keys that failed together do not come back together.
    return equalJitterMs(base);
  }

  async #handleMessage(m: JsMsg, receivedAt: number): Promise<void> {
    // A message waits in its key's queue and then runs its handler; telling the
    // server it is in progress every half ack wait keeps a slow one from being
    // redelivered to another instance meanwhile (which would only wait on the
    // row lock and end as a duplicate).
    const o = this.#o;
    if (Date.now() - receivedAt > o.ackWaitMs / 4) m.working();
    const keepAlive = setInterval(() => m.working(), Math.max(500, Math.floor(o.ackWaitMs / 2)));
    try {
      await this.#handle(m);
    } finally {
      clearInterval(keepAlive);
    }
  }

  async #handle(m: JsMsg): Promise<void> {
    const o = this.#o;
    const seq = m.info.streamSequence;
    const headerNames = m.headers ? [...m.headers.keys()] : [];
    let event: FerryEvent;
    try {
      event = decodeEvent((name) => m.headers?.get(name) || undefined, m.data, m.subject, headerNames);
      validateKey(event.key, WIRE_HEADERS.partitionKey);
      validateKey(event.id, WIRE_HEADERS.id);
    } catch (err) {
      await this.#parkMessage(m, undefined, 'undecodable-headers', errorText(err));
      return;
    }
    const tracked = this.#tracked.get(seq);
    const attempt = Math.max(1, m.info.deliveryCount - (tracked?.gapNaks ?? 0));
    const source = { attempt, deliveries: m.info.deliveryCount, streamSequence: seq, via: 'stream' as const };
    await inProcessSpan(event, o.stream, o.consumer, source, () => this.#settle(m, event, attempt));
  }

  /** Gate → handler → COMMIT of a decoded stream message, then its ack, nak or park. */
  async #settle(m: JsMsg, event: FerryEvent, attempt: number): Promise<void> {
    const o = this.#o;
    const seq = m.info.streamSequence;
    let outcome: GateOutcome;
    try {
      const early = o.mode === 'sequential' && o.gapTimeoutMs > 0 ? () => this.#messageData(m, event, 'gap-timeout', '') : undefined;
      outcome = await this.#gate(event, attempt, false, early ? { early } : {});
    } catch (error) {
      this.#counts.failed++;
      const willRetry = attempt < o.maxDeliver;
      o.onEvent({ kind: 'failed', consumer: o.consumer, id: event.id, key: event.key, version: event.version, attempt, error, willRetry });
      o.logger.warn({ err: error, id: event.id, key: event.key, attempt }, 'inbox handler failed');
      if (willRetry) {
        this.#track(seq);
        m.nak(this.#backoffMs(attempt));
      } else {
        await this.#parkMessage(m, event, 'handler-failed', errorText(error));
      }
      return;
    }
    const base = { consumer: o.consumer, id: event.id, key: event.key, version: event.version };
    switch (outcome.kind) {
      case 'applied':
        m.ack();
        this.#tracked.delete(seq);
        this.#counts.applied++;
        o.onEvent({ kind: 'applied', ...base, type: event.type, durationMs: outcome.durationMs, fromPark: false });
        if (this.#earlyKeys.has(event.key)) await this.#drainEarly(event.key);
        return;
      case 'stale':
        m.ack();
        this.#tracked.delete(seq);
        this.#counts.stale++;
        o.onEvent({ kind: 'stale', ...base, recorded: outcome.recorded });
        return;
      case 'duplicate':
        m.ack();
        this.#tracked.delete(seq);
        this.#counts.duplicate++;
        o.onEvent({ kind: 'duplicate', ...base });
        return;
      case 'held':
        // Stored in inbox_early: acked, so it holds no ack-pending slot while it waits.
        m.ack();
        this.#tracked.delete(seq);
        this.#counts.gap++;
        if (this.#earlyKeys.size >= MAX_TRACKED) this.#earlyKeys.clear(); // only a hint: the sweep finds the rest
        this.#earlyKeys.add(event.key);
        o.onEvent({ kind: 'gap', ...base, recorded: outcome.recorded, waitedMs: 0 });
        return;
      case 'gap': {
        if (o.gapTimeoutMs === 0) {
          this.#counts.gap++;
          o.onEvent({ kind: 'gap', ...base, recorded: outcome.recorded, waitedMs: 0 });
          await this.#parkMessage(
            m,
            event,
            'gap-timeout',
            `version ${outcome.recorded + 1n} of key ${JSON.stringify(event.key)} is missing (gapTimeoutMs 0)`,
          );
          return;
        }
        // Its predecessor committed between the gate and the store: look again shortly. Not an attempt.
        this.#track(seq).gapNaks++;
        m.nak(o.gapRetryMs);
        return;
      }
      case 'park':
        await this.#parkMessage(m, event, outcome.reason, outcome.error);
        return;
    }
  }

  /** A stream message as the parking lot (and `inbox_early`) keep it: as it came, with why. */
  #messageData(m: JsMsg, event: FerryEvent | undefined, reason: ParkReason, error: string): ParkedJobData {
    const o = this.#o;
    const headers: Array<[string, string]> = [];
    if (m.headers) for (const [name, values] of m.headers) for (const v of values) headers.push([name, v]);
    return {
      format: 1,
      consumer: o.consumer,
      mode: o.mode,
      stream: o.stream,
      streamSeq: m.info.streamSequence,
      natsSubject: m.subject,
      headers,
      body: Buffer.from(m.data).toString('base64'),
      reason,
      error,
      parkedAt: new Date().toISOString(),
      deliveries: m.info.deliveryCount,
      ...(event ? { id: event.id, key: event.key, version: event.version.toString(), type: event.type } : {}),
    };
  }

  /** Parks a stream message, then acks it; if parking fails, naks it so it comes back. */
  async #parkMessage(m: JsMsg, event: FerryEvent | undefined, reason: ParkReason, error: string): Promise<void> {
    const o = this.#o;
    const seq = m.info.streamSequence;
    const data = this.#messageData(m, event, reason, error);
    try {
      const parked = await this.#park(data, event);
      m.ack();
      this.#tracked.delete(seq);
      if (parked.stale) {
        this.#counts.stale++;
        if (event)
          o.onEvent({
            kind: 'stale',
            consumer: o.consumer,
            id: event.id,
            key: event.key,
            version: event.version,
            recorded: parked.recorded,
          });
        return;
      }
      this.#counts.parked++;
      o.onEvent({ kind: 'parked', consumer: o.consumer, id: event?.id, key: event?.key, reason, error, jobId: parked.jobId });
      o.logger.warn({ consumer: o.consumer, id: event?.id, key: event?.key, reason, error, jobId: parked.jobId }, 'inbox parked an event');
      // The key's stored early versions follow it into the parking lot, in order, behind it.
      if (event && o.mode === 'sequential' && reason !== 'behind-parked') {
        const behind = `key ${JSON.stringify(event.key)} has version ${event.version} parked ahead of it`;
        // The message is acked already; if this fails, the sweep moves them once they time out.
        await this.#flushEarly(event.key, 'behind-parked', behind, true).catch((err: unknown) =>
          o.logger.warn({ err, consumer: o.consumer, key: event.key }, 'inbox could not park stored early versions behind a parked event'),
        );
      }
    } catch (err) {
      o.logger.error({ err, consumer: o.consumer, streamSeq: seq }, 'inbox could not park an event; it will be redelivered');
      m.nak(this.#backoffMs(o.backoffMs.length));
    }
  }

  /**
   * Enqueues a parked event in one transaction with its key's parked count,
   * so in `sequential` mode the key's later events park behind it. An event
   * that became stale meanwhile is not parked.
   */
  async #park(
    data: ParkedJobData,
    event: FerryEvent | undefined,
  ): Promise<{ stale: true; recorded: bigint } | { stale: false; jobId: string | null }> {
    const o = this.#o;
    const boss = this.#boss;
    if (!boss) throw new ConfigError('boss', 'inbox is not started');
    return withTransaction(o.pool, async (tx) => {
      if (event && o.mode !== 'dedupe') {
        const row = await lockKey(tx, this.#s, o.consumer, event.key);
        if (event.version <= row.version) return { stale: true as const, recorded: row.version };
        if (o.mode === 'sequential') await addParked(tx, this.#s, o.consumer, event.key, 1);
      }
      const jobId = await boss.send(this.parkQueue, data, {
        singletonKey: parkKey(event?.key, o.stream, data.streamSeq),
        db: pgBossDb(tx),
      });
      return { stale: false as const, jobId };
    });
  }

  /** Counts and reports stored early versions that moved to the parking lot. */
  #reportMoved(moved: readonly MovedEarly[]): void {
    const o = this.#o;
    for (const p of moved) {
      this.#counts.parked++;
      o.onEvent({ kind: 'parked', consumer: o.consumer, id: p.id, key: p.key, reason: p.reason, error: p.error, jobId: p.jobId });
    }
    const [head] = moved;
    if (head) {
      o.logger.warn(
        { consumer: o.consumer, key: head.key, reason: head.reason, error: head.error, parked: moved.length },
        'inbox parked stored early versions of a key',
      );
    }
  }

  // ---- sequential mode: early versions wait in PostgreSQL -------------------------------------

  /** Runs a drain or flush of a key's stored versions in the key's turn of the scheduler, once. */
  #queueEarly(key: string, what: 'drain' | 'flush'): void {
    const id = `${what}\u0000${key}`;
    if (this.#stopping || this.#earlyQueued.has(id)) return;
    this.#earlyQueued.add(id);
    this.#scheduler.push(key, async () => {
      this.#earlyQueued.delete(id);
      if (what === 'drain') await this.#drainEarly(key);
      else await this.#flushEarly(key, 'gap-timeout', undefined, false);
    });
  }

  /**
   * Applies a key's stored versions that follow its recorded one, in order,
   * each through the gate in a transaction that also deletes it. Stops at the
   * first version not stored (or not due). Runs in the key's scheduler turn.
   */
  async #drainEarly(key: string): Promise<void> {
    const o = this.#o;
    for (;;) {
      const run = await readyEarlyRun(o.pool, this.#s, o.consumer, key, DRAIN_BATCH);
      if (run.length === 0) return;
      for (const next of run) {
        if (this.#stopping) return;
        const go = await this.#applyEarly(key, next);
        if (!go) return;
      }
    }
  }

  /** One stored version through the gate; `false` when the drain must stop there. */
  async #applyEarly(key: string, next: ReadyEarly): Promise<boolean> {
    const o = this.#o;
    let event: FerryEvent;
    try {
      event = decodeParked(next.message);
    } catch (err) {
      await this.#flushEarly(key, 'undecodable-headers', errorText(err), true);
      return false;
    }
    const attempt = next.attempts + 1;
    return inProcessSpan(event, o.stream, o.consumer, { attempt, via: 'early' }, () => this.#applyEarlyEvent(key, next, event, attempt));
  }

  async #applyEarlyEvent(key: string, next: ReadyEarly, event: FerryEvent, attempt: number): Promise<boolean> {
    const o = this.#o;
    const base = { consumer: o.consumer, id: event.id, key: event.key, version: event.version };
    let outcome: GateOutcome;
    try {
      outcome = await this.#gate(event, attempt, false, { commitWith: deleteEarlySql(this.#s, o.consumer, key, next.version) });
    } catch (error) {
      this.#counts.failed++;
      const willRetry = attempt < o.maxDeliver;
      o.onEvent({ kind: 'failed', ...base, attempt, error, willRetry });
      o.logger.warn({ err: error, id: event.id, key: event.key, attempt }, 'inbox handler failed');
      if (willRetry) await failEarly(o.pool, this.#s, o.consumer, key, next.version, this.#backoffMs(attempt));
      else await this.#flushEarly(key, 'handler-failed', errorText(error), true);
      return false;
    }
    switch (outcome.kind) {
      case 'applied':
        this.#counts.applied++;
        o.onEvent({ kind: 'applied', ...base, type: event.type, durationMs: outcome.durationMs, fromPark: false });
        return true;
      case 'stale':
        this.#counts.stale++;
        o.onEvent({ kind: 'stale', ...base, recorded: outcome.recorded });
        return true;
      case 'duplicate':
        this.#counts.duplicate++;
        o.onEvent({ kind: 'duplicate', ...base });
        return true;
      case 'park':
        // A key that got parked events meanwhile keeps its stored versions until the parking lot is through.
        if (outcome.reason !== 'behind-parked') await this.#flushEarly(key, outcome.reason, outcome.error, true);
        return false;
      default:
        return false;
    }
  }

  /**
   * Moves a key's stored versions to the parking lot, in version order, each in
   * a transaction with the key's parked count: the first with `reason`, the
   * rest `behind-parked`. For a gap timeout (`force` false) nothing moves when
   * the gap closed meanwhile; the key is drained instead.
   */
  async #flushEarly(key: string, reason: ParkReason, error: string | undefined, force: boolean): Promise<void> {
    const o = this.#o;
    const boss = this.#boss;
    if (!boss) throw new ConfigError('boss', 'inbox is not started');
    const moved: MovedEarly[] = [];
    // One stored version per transaction: pg-boss orders a key's jobs by created_on, which is
    // the transaction's start time, so jobs sent in one transaction would tie (and come back in
    // id order, which is random).
    for (;;) {
      const step = await withTransaction(o.pool, async (tx): Promise<'ready' | 'done' | MovedEarly> => {
        const row = await lockKey(tx, this.#s, o.consumer, key);
        const e = await lockFirstEarly(tx, this.#s, o.consumer, key, row.version);
        if (!e) return 'done';
        const head = moved[0];
        if (!head && !force && e.version === row.version + 1n && row.parked === 0) return 'ready';
        let why: { reason: ParkReason; error: string };
        if (head) why = { reason: 'behind-parked', error: `key ${JSON.stringify(key)} has version ${head.version} parked ahead of it` };
        else if (row.parked > 0 && !force)
          why = { reason: 'behind-parked', error: `key ${JSON.stringify(key)} has ${row.parked} parked event(s) ahead of it` };
        else why = { reason, error: error ?? `waited ${e.waitedMs} ms for version ${row.version + 1n} of key ${JSON.stringify(key)}` };
        const data: ParkedJobData = { ...e.message, reason: why.reason, error: why.error, parkedAt: new Date().toISOString() };
        const jobId = await boss.send(this.parkQueue, data, { singletonKey: key, db: pgBossDb(tx) });
        await addParked(tx, this.#s, o.consumer, key, 1);
        await deleteEarly(tx, this.#s, o.consumer, key, e.version);
        return { id: e.message.id, key, version: e.version, ...why, jobId };
      });
      if (step === 'ready') {
        await this.#drainEarly(key);
        return;
      }
      if (step === 'done') break;
      moved.push(step);
    }
    this.#reportMoved(moved);
  }

  /** The sweep: applies stored versions whose gap closed (on any instance), parks those that waited `gapTimeoutMs`. */
  async #sweepEarly(): Promise<void> {
    const o = this.#o;
    if (this.#stopping) return;
    try {
      const work = await findEarlyWork(o.pool, this.#s, o.consumer, o.gapTimeoutMs, SWEEP_BATCH);
      for (const w of work) this.#queueEarly(w.key, w.ready ? 'drain' : 'flush');
    } catch (err) {
      o.logger.warn({ err, consumer: o.consumer }, 'inbox early-version sweep failed; it runs again shortly');
    }
  }

  // ---- the park worker -----------------------------------------------------------------------

  /** Retries one parked event through the same gate; throws (so pg-boss retries, then fails it) when it still cannot apply. */
  async #retryParked(job: Job<ParkedJobData>): Promise<void> {
    const o = this.#o;
    const boss = this.#boss;
    if (!boss) throw new ConfigError('boss', 'inbox is not started');
    if (!isParkedJobData(job.data)) throw new PoisonMessageError('undecodable-headers', `parked job ${job.id} is not a Ferry parked event`);
    const event = decodeParked(job.data);
    const attempt = job.retryCount + 1;
    await inProcessSpan(event, o.stream, o.consumer, { attempt, via: 'park' }, () => this.#retryParkedEvent(job, event, attempt, boss));
  }

  async #retryParkedEvent(job: Job<ParkedJobData>, event: FerryEvent, attempt: number, boss: PgBoss): Promise<void> {
    const o = this.#o;
    const outcome = await this.#gate(event, attempt, true, {
      beforeCommit: async (tx) => {
        if (o.mode === 'sequential') await addParked(tx, this.#s, o.consumer, event.key, -1);
        await boss.complete(this.parkQueue, job.id, null, { db: pgBossDb(tx) });
      },
    });
    if (outcome.kind === 'park')
      throw new PoisonMessageError(outcome.reason === 'unknown-type' ? 'unknown-type' : 'undecodable-body', outcome.error);
    if (outcome.kind === 'gap') {
      throw new Error(
        `version ${event.version} of key ${JSON.stringify(event.key)} waits for version ${outcome.recorded + 1n}, which is neither applied nor parked`,
      );
    }
    const base = { consumer: o.consumer, id: event.id, key: event.key, version: event.version };
    if (outcome.kind === 'applied') {
      this.#counts.applied++;
      o.onEvent({ kind: 'applied', ...base, type: event.type, durationMs: outcome.durationMs, fromPark: true });
      if (o.mode === 'sequential') this.#queueEarly(event.key, 'drain');
    } else if (outcome.kind === 'stale') {
      this.#counts.stale++;
      o.onEvent({ kind: 'stale', ...base, recorded: outcome.recorded });
    } else if (outcome.kind === 'duplicate') {
      this.#counts.duplicate++;
      o.onEvent({ kind: 'duplicate', ...base });
    }
  }
}

/**
 * Creates an inbox: a durable JetStream pull consumer whose every message
 * runs version gate → handler → COMMIT in one PostgreSQL transaction, then is
 * acked. See the package README for a complete consumer.
 *
 * The event map is never inferred from the handlers (`NoInfer`): give it
 * (`createInbox<OrderEvents>(…)`) for typed payloads, or leave it out and every
 * handler gets `payload: unknown`.
 */
export function createInbox<E extends EventMap = EventMap>(options: InboxOptions<NoInfer<E>>): Inbox {
  return new InboxImpl(compileInboxOptions(options));
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

/**
 * Creates or upgrades the consumer-side tables (`inbox_versions`,
 * `inbox_messages`) in `schema`: what `ferry migrate --inbox` runs.
 */
export function migrateInbox(options: { pool: ConnectionPool; schema?: string }): Promise<MigrateResult> {
  return migrate({ pool: options.pool, schema: options.schema ?? DEFAULT_SCHEMA, set: 'inbox' });
}
