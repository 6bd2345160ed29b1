// The inbox's lifecycle (start, stop) and its consume loop. The parts it wires
// together live one job per file: consumer-config.ts (the durable consumer),
// gate.ts (version gate → handler → COMMIT), outcomes.ts (counts and onEvent),
// park.ts (stream messages into the parking lot), early-versions.ts
// (`sequential` versions that wait in inbox_early), park-worker.ts (the
// parking lot's retries). Over ~350 lines because start() orders those
// parts (tables check, consumer, pg-boss and its workers, consume loop, sweep)
// and stop() undoes them in reverse: the two are read against each other.
import {
  ConfigError,
  type ConnectionPool,
  DEFAULT_SCHEMA,
  decodeMessage,
  equalJitterMs,
  type FerryEvent,
  headerPairs,
  type MigrateResult,
  MigrationError,
  migrate,
  pgBossDb,
  protectPool,
  quoteIdentifier,
  startPgBoss,
  WIRE_HEADERS,
} from '@ferry/core';
import { type ConsumerMessages, type JsMsg, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { PgBoss } from 'pg-boss';
import { ensureConsumer } from './consumer-config.js';
import { startDedupePrune } from './dedupe-prune.js';
import { DeliveryAttempts } from './delivery-attempts.js';
import { EarlyVersions } from './early-versions.js';
import { Gate } from './gate.js';
import { Heartbeat } from './heartbeat.js';
import { endIntake } from './intake-drain.js';
import { KeyScheduler } from './key-scheduler.js';
import { InboxMetrics, startLagSampler } from './metrics.js';
import { type CompiledInboxOptions, compileInboxOptions, ownQueries, parkQueueName } from './options.js';
import { errorText, type GateOutcome, OutcomeReporter, observed } from './outcomes.js';
import { Parking } from './park.js';
import { ParkWorker } from './park-worker.js';
import { findParkedElsewhere } from './parked-elsewhere.js';
import { inboxTablesExist } from './sql/inbox-tables.js';
import { inProcessSpan } from './tracing.js';
import type { AnyContract, ContractInboxOptions, EventMap, Inbox, InboxCounts, InboxOptions, InboxState } from './types.js';

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
  readonly #attempts = new DeliveryAttempts();
  readonly #workerIds: string[] = [];
  readonly #metrics: InboxMetrics | undefined;
  #stopLagSampler: (() => void) | undefined;
  readonly #report: OutcomeReporter;
  readonly #gate: Gate;
  readonly #early: EarlyVersions;
  readonly #parking: Parking;
  readonly #parkWorker: ParkWorker;
  readonly #heartbeat: Heartbeat;

  constructor(options: CompiledInboxOptions) {
    this.#s = quoteIdentifier(options.schema);
    this.parkQueue = parkQueueName(options.consumer);
    this.#scheduler = new KeyScheduler(options.concurrency, (err) => this.#o.logger.error({ err }, 'inbox task failed unexpectedly'));
    this.#metrics = options.metrics ? new InboxMetrics(options.metrics, options.consumer, () => this.#scheduler.size) : undefined;
    const o = Object.freeze({ ...options, onEvent: observed(options.onEvent, this.#metrics) });
    this.#o = o;
    const s = this.#s;
    const b = quoteIdentifier(o.bossSchema);
    const parkQueue = this.parkQueue;
    const boss = () => this.#startedBoss();
    const backoffMs = (attempt: number) => this.#backoffMs(attempt);
    const report = new OutcomeReporter(o, this.#counts);
    const gate = new Gate(o, s, this.#metrics, boss);
    const stopping = () => this.#stopping !== undefined;
    const early = new EarlyVersions({ o, s, b, parkQueue, scheduler: this.#scheduler, gate, report, boss, stopping, backoffMs });
    const forget = (seq: number) => this.#attempts.forget(seq);
    this.#parking = new Parking({ o, s, b, parkQueue, report, early, boss, forget, backoffMs });
    this.#parkWorker = new ParkWorker(o, s, b, parkQueue, { gate, report, early, boss });
    this.#report = report;
    this.#gate = gate;
    this.#early = early;
    this.#heartbeat = new Heartbeat({
      db: ownQueries(o),
      s,
      consumer: o.consumer,
      stream: o.stream,
      mode: o.mode,
      intervalMs: o.heartbeatIntervalMs,
      logger: o.logger,
    });
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
    await ensureConsumer(o);
    await this.#startBoss();
    await this.#warnParkedElsewhere();
    // Before the first message: once handlers run they may hold every pool connection (a handler
    // waiting on its own dependency), and a first beat queued behind them held start() for that long.
    await this.#heartbeat.start();
    const js = jetstream(o.nc);
    const consumer = await js.consumers.get(o.stream, o.consumer);
    // Pull requests expire after pullExpiresMs (default 10 s; nats.js: 30 s), so heartbeats come
    // every half of it, a consumer whose server or stream leader died pulls again within about
    // that long, and stop() waits at most that long for the open request to end (intake-drain.ts).
    this.#messages = await consumer.consume({ max_messages: Math.min(o.maxAckPending, 256), expires: o.pullExpiresMs });
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
      this.#early.startSweeping(every);
    }
    this.#state = 'running';
    o.logger.info({ stream: o.stream, consumer: o.consumer, mode: o.mode, instance: this.#heartbeat.instance }, 'inbox started');
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
    // Stop intake: no more pull requests; the open ones end (filled or expired) and what they
    // still deliver is applied and acked like any message (intake-drain.ts says why not cut or nak'ed).
    this.#early.stopSweeping();
    this.#stopLagSampler?.();
    const messages = this.#messages;
    const loop = this.#loop;
    if (messages && loop) await step('stop consuming', () => endIntake(messages, loop, this.#o.pullExpiresMs + 1_000));
    await step('early-version sweep', () => this.#early.sweeping);
    await step('consume loop', () => this.#loop);
    await step('drain in-flight', () => this.#scheduler.idle());
    const boss = this.#boss;
    if (boss) {
      // A caller's pg-boss bounds none of its statements (ours does: ownQueries), and one lost in a
      // partition kept its stop waiting forever after the heal: its grace for a running parked job and
      // one bounded transaction, then stop() goes on without it (and ends 'failed').
      const o = this.#o;
      const boundMs = o.ackWaitMs + o.maxTransactionMs;
      if (this.#ownBoss)
        await step('stop pg-boss', () =>
          within(boss.stop({ graceful: true, close: false, timeout: o.ackWaitMs }), boundMs, 'pg-boss stop'),
        );
      else
        for (const id of this.#workerIds)
          await step('stop park worker', () => within(boss.offWork(this.parkQueue, { id, wait: true }), boundMs, 'park worker stop'));
    }
    await step('flush acks', () => this.#o.nc.flush());
    // Gone, not stale: ferry status and the console stop listing it (a killed inbox's row expires).
    await step('remove heartbeat', () => this.#heartbeat.stop());
    this.#state = errors.length > 0 ? 'failed' : 'stopped';
    this.#o.logger.info({ consumer: this.#o.consumer, counts: this.#counts }, 'inbox stopped');
  }

  // ---- pg-boss: parking lot and maintenance --------------------------------------------------

  #startedBoss(): PgBoss {
    const boss = this.#boss;
    if (!boss) throw new ConfigError('boss', 'inbox is not started');
    return boss;
  }

  /**
   * Parked events this inbox would never see: left under the old default pg-boss schema by an
   * earlier release, or counted in inbox_versions but missing from `bossSchema`. A warning per
   * finding says where they are and what to do; the start goes on (they are data, not a fault).
   */
  async #warnParkedElsewhere(): Promise<void> {
    const o = this.#o;
    try {
      const findings = await findParkedElsewhere(o.pool, {
        schema: o.schema,
        bossSchema: o.bossSchema,
        consumer: o.consumer,
        oldBossSchemas: o.oldBossSchema === undefined ? [] : [o.oldBossSchema],
      });
      for (const f of findings) {
        o.logger.warn(
          {
            consumer: f.consumer,
            bossSchema: f.bossSchema,
            parkedHere: f.here,
            parkedCounted: f.counted,
            elsewhere: f.elsewhere,
            fix: f.fix,
          },
          `inbox: ${f.advice}`,
        );
      }
    } catch (err) {
      o.logger.debug({ err }, 'inbox could not look for parked events outside its pg-boss schema');
    }
  }

  async #startBoss(): Promise<void> {
    const o = this.#o;
    let boss = o.boss;
    if (!boss) {
      const own = new PgBoss({
        // Its statements bounded like ours, so one lost in a partition fails instead of holding its workers (and stop()) forever.
        db: pgBossDb(ownQueries(o)),
        schema: o.bossSchema,
        schedule: o.mode === 'dedupe',
        supervise: true,
        // A parked job whose worker died is put back within PARK_HEARTBEAT_SECONDS plus this.
        superviseIntervalSeconds: 10,
      });
      own.on('error', (err) => o.logger.error({ err }, 'inbox pg-boss error'));
      await startPgBoss(() => own.start());
      boss = own;
      this.#ownBoss = true;
    }
    this.#boss = boss;
    const check = o.boss && o.mode === 'sequential' ? () => this.#checkBossSchema() : undefined;
    this.#workerIds.push(await this.#parkWorker.start(boss, check));
    if (o.mode === 'dedupe') this.#workerIds.push(await startDedupePrune(boss, o, this.#s));
  }

  /**
   * `sequential` mode keeps a key's parked events in version order with SQL on the parking lot's
   * job table (sql/park-order.ts), so the schema of a caller's pg-boss must be `bossSchema`.
   */
  async #checkBossSchema(): Promise<void> {
    const o = this.#o;
    const found = await o.pool
      .query<{ ok: boolean }>('SELECT to_regclass($1) IS NOT NULL AS ok', [`${quoteIdentifier(o.bossSchema)}.job`])
      .then(async (r) => {
        if (!r.rows[0]?.ok) return false;
        const q = await o.pool.query(`SELECT 1 FROM ${quoteIdentifier(o.bossSchema)}.queue WHERE name = $1`, [this.parkQueue]);
        return q.rows.length > 0;
      });
    if (!found) {
      throw new ConfigError(
        'bossSchema',
        `the pg-boss passed as \`boss\` has no queue ${this.parkQueue} in schema ${JSON.stringify(o.bossSchema)}: pass createInbox({ bossSchema }) the schema that pg-boss was constructed with (a sequential inbox orders its parking lot there)`,
      );
    }
  }

  // ---- stream messages -----------------------------------------------------------------------

  async #consumeLoop(messages: ConsumerMessages): Promise<void> {
    try {
      for await (const m of messages) {
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
    // row lock and end as a duplicate). Never for longer than maxTransactionMs:
    // an instance cut off from PostgreSQL but not from NATS kept its key for the
    // whole cut (issue 41); by then its transaction was given up and the message
    // nak'ed, and if anything after that hangs too, JetStream redelivers it one
    // ack wait after the last extension.
    const o = this.#o;
    if (Date.now() - receivedAt > o.ackWaitMs / 4) m.working();
    const started = performance.now();
    const keepAlive = setInterval(
      () => {
        if (performance.now() - started < o.maxTransactionMs) m.working();
        else clearInterval(keepAlive);
      },
      Math.max(500, Math.floor(o.ackWaitMs / 2)),
    );
    try {
      await this.#handle(m);
    } finally {
      clearInterval(keepAlive);
    }
  }

  async #handle(m: JsMsg): Promise<void> {
    const o = this.#o;
    const seq = m.info.streamSequence;
    let event: FerryEvent;
    try {
      // The one decoder the parking lot's copies go through too (parked-job.ts): what it refuses here is never applied there.
      event = decodeMessage(headerPairs(m.headers), m.data, m.subject);
    } catch (err) {
      await this.#parking.parkMessage(m, undefined, 'undecodable-headers', errorText(err));
      return;
    }
    const attempt = this.#attempts.attempt(seq, m.info.deliveryCount);
    const source = { attempt, deliveries: m.info.deliveryCount, streamSequence: seq, via: 'stream' as const };
    await inProcessSpan(event, o.stream, o.consumer, source, () => this.#settle(m, event, attempt));
  }

  /** Gate → handler → COMMIT of a decoded stream message, then its ack, nak or park. */
  async #settle(m: JsMsg, event: FerryEvent, attempt: number): Promise<void> {
    const o = this.#o;
    const seq = m.info.streamSequence;
    let outcome: GateOutcome;
    try {
      const early =
        o.mode === 'sequential' && o.gapTimeoutMs > 0 ? () => this.#parking.messageData(m, event, 'gap-timeout', '') : undefined;
      outcome = await this.#gate.run(event, attempt, false, early ? { early } : {});
    } catch (error) {
      const willRetry = attempt < o.maxDeliver;
      this.#report.failed(event, attempt, error, willRetry);
      if (willRetry) {
        this.#attempts.track(seq);
        m.nak(this.#backoffMs(attempt));
      } else {
        await this.#parking.parkMessage(m, event, 'handler-failed', errorText(error));
      }
      return;
    }
    switch (outcome.kind) {
      case 'applied':
      case 'stale':
      case 'duplicate':
        m.ack();
        this.#attempts.forget(seq);
        this.#report.settled(outcome, event, false);
        if (outcome.kind === 'applied') await this.#early.applied(event.key);
        return;
      case 'held':
        // Stored in inbox_early: acked, so it holds no ack-pending slot while it waits.
        m.ack();
        this.#attempts.forget(seq);
        this.#early.held(event.key);
        this.#report.gap(event, outcome.recorded);
        return;
      case 'gap': {
        if (o.gapTimeoutMs === 0) {
          this.#report.gap(event, outcome.recorded);
          await this.#parking.parkMessage(
            m,
            event,
            'gap-timeout',
            `version ${outcome.recorded + 1n} of key ${JSON.stringify(event.key)} is missing (gapTimeoutMs 0)`,
          );
          return;
        }
        // Its predecessor committed between the gate and the store: look again shortly. Not an attempt.
        this.#attempts.track(seq).gapNaks++;
        m.nak(o.gapRetryMs);
        return;
      }
      case 'park':
        await this.#parking.parkMessage(m, event, outcome.reason, outcome.error);
        return;
    }
  }
}

/** `work`, or a rejection once `ms` have passed without it ending (the work itself goes on: it cannot be cancelled). */
async function within<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`${what} did not end within ${ms} ms (a statement of its own got no answer: is PostgreSQL reachable?)`)),
      ms,
    );
  });
  try {
    return await Promise.race([work, bound]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Creates an inbox: a durable JetStream pull consumer whose every message
 * runs version gate → handler → COMMIT in one PostgreSQL transaction, then is
 * acked. See the package README for a complete consumer.
 *
 * The event map is never inferred from the handlers (`NoInfer`): give it
 * (`createInbox<OrderEvents>(…)`) for typed payloads, or leave it out and every
 * handler gets `payload: unknown`. Options: {@link InboxOptions}; nothing
 * connects until `start()`.
 *
 * @example
 * const inbox = createInbox<OrderEvents>({ pool, nc, stream: 'ORDERS', consumer: 'billing', handlers });
 * await inbox.start();
 * // … on shutdown: stops intake, drains in-flight handlers, flushes acks
 * await inbox.stop();
 */
export function createInbox<C extends AnyContract>(options: ContractInboxOptions<C>): Inbox;
export function createInbox<E extends EventMap = EventMap>(options: InboxOptions<NoInfer<E>>): Inbox;
export function createInbox(options: InboxOptions): Inbox {
  return new InboxImpl(compileInboxOptions(options));
}

/**
 * Creates or upgrades the consumer-side tables (`inbox_versions`,
 * `inbox_messages`) in `schema`: what `ferry migrate --inbox` runs.
 */
export function migrateInbox(options: { pool: ConnectionPool; schema?: string }): Promise<MigrateResult> {
  return migrate({ pool: options.pool, schema: options.schema ?? DEFAULT_SCHEMA, set: 'inbox' });
}
