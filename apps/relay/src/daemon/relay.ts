// The relay's lifecycle in one file (just over ~350 lines) because start() wires the parts in an
// order that matters (settings checks, NATS, streams, dispatcher, janitor, lanes, notifier) and
// stop/teardown undo it in reverse: the two orders are read against each other. The parts live one job per
// file: dispatcher.ts, lane-leaser.ts (and lease-*.ts), nats-probe.ts, pg-bounds.ts, notifier.ts, janitor.ts, metrics.ts, ../sql/.
import { randomBytes } from 'node:crypto';
import { ConfigError, childLogger, laneCountSql, notifyChannel, protectPool, quoteIdentifier, SQLSTATE, sqlState } from '@ferry/core';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { type CircuitBreakerPolicy, CircuitState, ConsecutiveBreaker, circuitBreaker, handleWhen } from 'cockatiel';
import pg from 'pg';
import { formatDuration } from '../duration.js';
import { NatsUnavailableError, NotMigratedError } from '../errors.js';
import { connectWhenReachable, natsServerNames } from '../nats-connect.js';
import { compileRelayOptions, RELAY_DEFAULTS } from '../relay-options.js';
import { backlogSql } from '../sql/backlog.js';
import { readRetentionSql } from '../sql/retention.js';
import type { CompiledRelayOptions, Logger, Relay, RelayEvents, RelayOptions, RelayState } from '../types.js';
import { Dispatcher } from './dispatcher.js';
import { DuplicateWindowWatch } from './duplicate-window-watch.js';
import { ensureStreams } from './ensure-streams.js';
import { Janitor } from './janitor.js';
import { LaneLeaser, leaseSafetyMarginMs } from './lane-leaser.js';
import { lockNamespace } from './lease-legacy-locks.js';
import { RelayMetrics } from './metrics.js';
import { drainNats, NatsProbe } from './nats-probe.js';
import { Notifier } from './notifier.js';
import { pgBounds } from './pg-bounds.js';
import { PubAcks } from './pub-acks.js';
import { RelayEmitter, type RelayTestHooks } from './relay-emitter.js';
import { checkRelayFloor } from './relay-floor.js';
import { WaitRecord } from './wait-record.js';
import { WireFence } from './wire-fence.js';

const CIRCUIT_NAMES = { [CircuitState.Closed]: 'closed', [CircuitState.Open]: 'open', [CircuitState.HalfOpen]: 'half-open' } as const;

class RelayImpl implements Relay {
  readonly instanceId = randomBytes(4).toString('hex');
  readonly #o: CompiledRelayOptions;
  readonly #log: Logger;
  readonly #schemaSql: string;
  readonly #appName: string;
  readonly #events = new RelayEmitter();
  readonly #hooks: RelayTestHooks | undefined;
  readonly #metrics: RelayMetrics;
  readonly #breaker: CircuitBreakerPolicy;
  readonly #pool: pg.Pool;
  readonly #leaser: LaneLeaser;
  #acks: PubAcks | undefined;
  #windows: DuplicateWindowWatch | undefined;
  #state: RelayState = 'idle';
  #starting: Promise<void> | undefined;
  #stopping: Promise<void> | undefined;
  #tornDown: Promise<void> | undefined;
  #nc: NatsConnection | undefined;
  #natsUp = false;
  #natsUnhealthy = false;
  /** Pings NATS every sixth of the term: a relay cut off from it gives its lanes up within 0.75 + 1/6 of the term. */
  #natsProbe: NatsProbe | undefined;
  #dispatcher: Dispatcher | undefined;
  #notifier: Notifier | undefined;
  #janitor: Janitor | undefined;
  /** Resolves when `stop()` is called, so a start still waiting for NATS gives up at once. */
  #abandon: () => void = () => {};
  readonly #abandonStart = new Promise<'stop'>((resolve) => {
    this.#abandon = () => resolve('stop');
  });

  constructor(options: RelayOptions, hooks?: RelayTestHooks) {
    this.#o = compileRelayOptions(options);
    this.#hooks = hooks;
    this.#appName = `${this.#o.applicationName}:${this.instanceId}`;
    this.#log = childLogger(this.#o.logger, { instance: this.instanceId });
    this.#schemaSql = quoteIdentifier(this.#o.schema);
    // synchronous_commit off: a mark lost in a server crash only means a re-send, which JetStream drops as a duplicate.
    this.#pool = new pg.Pool({
      ...pgBounds(this.#o),
      connectionString: this.#o.databaseUrl,
      max: 4,
      application_name: this.#appName,
      options: `-c synchronous_commit=off ${pgBounds(this.#o).options}`,
    });
    // An idle client killed by the server must not crash the process; the pool replaces it.
    this.#pool.on('error', (err) => this.#log.debug({ err }, 'idle PostgreSQL connection lost'));
    protectPool(this.#pool);
    this.#metrics = new RelayMetrics(() => this.#readBacklog());
    this.#breaker = circuitBreaker(
      handleWhen((err) => err instanceof NatsUnavailableError),
      {
        halfOpenAfter: this.#o.breakerCooldownMs,
        breaker: new ConsecutiveBreaker(this.#o.breakerThreshold),
      },
    );
    this.#breaker.onStateChange((state) => {
      const name = CIRCUIT_NAMES[state as keyof typeof CIRCUIT_NAMES] ?? 'open';
      this.#metrics.circuitState.set(state === CircuitState.HalfOpen ? 2 : state === CircuitState.Closed ? 0 : 1);
      const fields = { event: 'circuit', state: name };
      if (name === 'open')
        this.#log.warn(fields, `NATS circuit open: publishing paused for ${this.#o.breakerCooldownMs} ms between probes`);
      else this.#log.info(fields, `NATS circuit ${name}`);
      this.#events.emit('relay:circuit', { state: name });
    });
    this.#leaser = new LaneLeaser({
      databaseUrl: this.#o.databaseUrl,
      schemaSql: this.#schemaSql,
      instance: this.instanceId,
      applicationName: this.#appName,
      lanesPerInstance: this.#o.lanesPerInstance,
      leaseTermMs: this.#o.leaseTermMs,
      pg: pgBounds(this.#o),
      healthy: () => this.#healthy(),
      onTakeover: () => {
        this.#metrics.leaseTakeovers.inc();
        this.#windows?.takeover();
      },
      // A lane lost with messages awaiting PubAcks: their bytes may still be in a socket buffer (wire-fence.ts).
      onLost: (lanes) => this.#acks?.lost(lanes),
      // Relays from before leases took lanes by these advisory locks: one started beside this relay finds none.
      legacyLaneNamespace: lockNamespace(`ferry:lanes:${this.#o.schema}`),
      logger: childLogger(this.#log, { component: 'lane-leaser' }),
    });
  }

  /**
   * Whether this instance can do the work its leases promise: NATS answered a
   * ping within the term less its margin, and the claim loop is not stuck. An
   * instance that cannot gives its lanes up (the leaser releases them), so an
   * instance that can reach NATS takes them on its next poll.
   */
  #healthy(): boolean {
    const limit = this.#o.leaseTermMs - leaseSafetyMarginMs(this.#o.leaseTermMs);
    if (!this.#nc) return true; // before the start connected: nothing to prove yet
    if (!this.#natsUp || (this.#natsProbe?.sinceOkMs() ?? 0) > limit) {
      if (!this.#natsUnhealthy) this.#log.warn({ event: 'nats-unproven' }, 'NATS has not answered within the lease term: lanes given up');
      this.#natsUnhealthy = true;
      return false;
    }
    this.#natsUnhealthy = false;
    return (this.#dispatcher?.stuckMs() ?? 0) <= limit;
  }

  get state(): RelayState {
    return this.#state;
  }

  get lanes(): readonly number[] {
    return this.#leaser.lanes;
  }

  get metricsContentType(): string {
    return this.#metrics.registry.contentType;
  }

  metrics(): Promise<string> {
    return this.#metrics.registry.metrics();
  }

  ready(): boolean {
    return (
      this.#state === 'running' &&
      this.#natsUp &&
      this.#leaser.connected &&
      (this.#leaser.lanes.length > 0 || this.#leaser.liveInstances > 1)
    );
  }

  on<K extends keyof RelayEvents>(event: K, listener: (e: RelayEvents[K]) => void): void {
    this.#events.on(event, listener);
  }

  async #readBacklog() {
    const { rows } = await this.#pool.query<{ pending: string; oldest_seconds: number; dead: string; blocked_keys: string }>(
      backlogSql(this.#schemaSql),
    );
    const r = rows[0];
    return {
      pending: Number(r?.pending ?? 0),
      oldestSeconds: r?.oldest_seconds ?? 0,
      dead: Number(r?.dead ?? 0),
      blockedKeys: Number(r?.blocked_keys ?? 0),
    };
  }

  start(): Promise<void> {
    if (this.#state === 'draining' || this.#state === 'stopped')
      return Promise.reject(
        new ConfigError('start', `relay is ${this.#state}: a stopped relay does not start again; create a new one with createRelay()`),
      );
    this.#starting ??= this.#start().catch(async (err) => {
      this.#state = 'failed';
      await this.#teardown();
      throw err;
    });
    return this.#starting;
  }

  async #start(): Promise<void> {
    const o = this.#o;
    this.#state = 'starting';
    // Fails fast on a wrong URL, a missing schema or an unmigrated database.
    const lanes = await this.#pool.query<{ value: string }>(laneCountSql(this.#schemaSql)).catch((err) => {
      if (sqlState(err) === SQLSTATE.undefinedTable) {
        throw new NotMigratedError(`schema "${o.schema}" has no Ferry outbox tables: run ferry migrate --schema ${o.schema} first`, {
          cause: err,
        });
      }
      throw err;
    });
    if (!lanes.rows[0])
      throw new NotMigratedError(`schema "${o.schema}" has no lane setting: run ferry migrate --schema ${o.schema} first`);
    await checkRelayFloor(this.#pool, this.#schemaSql, o.schema);
    // One retention per outbox: a relay given another one refuses to start rather than
    // prune by it (one started with --retention 0ms deleted every published row).
    if (o.retentionMs !== undefined) {
      const { rows } = await this.#pool.query<{ ms: string }>(readRetentionSql(this.#schemaSql));
      const stored = rows[0]?.ms;
      if (stored !== undefined && Number(stored) !== o.retentionMs) {
        throw new ConfigError(
          'retentionMs',
          `this relay was given a retention of ${formatDuration(o.retentionMs)} but the outbox in schema "${o.schema}" keeps published rows ${formatDuration(Number(stored))}, and every instance prunes by that one: leave --retention out, or change it for the outbox with ferry migrate --schema ${o.schema} --retention ${formatDuration(o.retentionMs)}`,
        );
      }
    }
    // noAsyncTraces: nats.js otherwise builds an Error with a stack trace per
    // request to improve async stack traces. Publishing no longer goes through
    // requests (see pub-acks.ts); stream management still does.
    const natsOptions = {
      maxReconnectAttempts: -1,
      reconnectTimeWait: 1000,
      noAsyncTraces: true,
      name: this.#appName,
      pingInterval: o.natsPingIntervalMs,
      maxPingOut: o.natsMaxPingOut,
      ...o.nats,
    };
    // A server that is down at start is waited for; a TLS verification failure is a misconfiguration
    // that waiting would never cure, so it ends the start with its reason instead of retrying forever.
    const nc = await connectWhenReachable(natsOptions, {
      servers: natsServerNames(o.nats.servers),
      logger: this.#log,
      abandoned: this.#abandonStart,
    });
    this.#nc = nc;
    this.#natsUp = true;
    this.#metrics.natsConnected.set(1);
    this.#watchNats(nc);
    this.#natsProbe = new NatsProbe(nc, Math.floor(o.leaseTermMs / 6));
    this.#natsProbe.start();
    this.#log.info({ event: 'nats-connected', server: nc.getServer() }, 'connected to NATS');
    if (o.ensureStreams.length > 0) await ensureStreams(await jetstreamManager(nc), o, this.#log);
    // The last lease check, in the same turn as the socket write (wire-fence.ts).
    const fence = new WireFence({
      holds: (lane, epoch) => this.#leaser.epoch(lane) === epoch,
      logger: childLogger(this.#log, { component: 'wire-fence' }),
      onLate: (marks) => this.#metrics.lateWrites.inc(marks.length),
    });
    const acks = new PubAcks(nc, o.publishTimeoutMs, fence);
    this.#acks = acks;
    const windows = new DuplicateWindowWatch({
      nc,
      leaseTermMs: o.leaseTermMs,
      publishTimeoutMs: o.publishTimeoutMs,
      logger: childLogger(this.#log, { component: 'duplicate-window' }),
    });
    this.#windows = windows;
    this.#dispatcher = new Dispatcher({
      options: o,
      schemaSql: this.#schemaSql,
      pool: this.#pool,
      acks,
      sending: (subject) => windows.saw(subject),
      leaser: this.#leaser,
      instance: this.instanceId,
      breaker: this.#breaker,
      metrics: this.#metrics,
      events: this.#events,
      ...(this.#hooks ? { hooks: this.#hooks } : {}),
      logger: childLogger(this.#log, { component: 'dispatcher' }),
      natsUp: () => this.#natsUp,
      maxPayload: () => nc.info?.max_payload,
      waits: o.listen
        ? {
            record: new WaitRecord(
              this.#pool,
              this.#schemaSql,
              this.instanceId,
              o.pollIntervalMs,
              childLogger(this.#log, { component: 'dispatcher' }),
            ),
            listening: () => this.#notifier?.connected === true,
          }
        : undefined,
    });
    if (o.maintenance) {
      this.#janitor = new Janitor({
        databaseUrl: o.databaseUrl,
        pool: this.#pool,
        schema: o.schema,
        schemaSql: this.#schemaSql,
        applicationName: this.#appName,
        retentionMs: o.retentionMs ?? RELAY_DEFAULTS.retentionMs,
        pruneCron: o.pruneCron,
        pruneBatchSize: o.pruneBatchSize,
        cronMonitorIntervalSeconds: o.cronMonitorIntervalSeconds,
        logger: childLogger(this.#log, { component: 'janitor' }),
        onPrune: (deleted, jobId) => this.#events.emit('relay:prune', { deleted, instance: this.instanceId, jobId }),
      });
      await this.#janitor.start();
    }
    await this.#leaser.tick();
    this.#metrics.lanesOwned.set(this.#leaser.lanes.length);
    const dispatcher = this.#dispatcher;
    this.#leaser.start(o.pollIntervalMs, dispatcher.busy, (lanes) => {
      this.#metrics.lanesOwned.set(lanes.length);
      dispatcher.wake();
    });
    dispatcher.start();
    if (o.listen) {
      this.#notifier = new Notifier({
        databaseUrl: o.databaseUrl,
        applicationName: this.#appName,
        channel: notifyChannel(o.schema),
        logger: childLogger(this.#log, { component: 'notifier' }),
        onWake: () => this.#dispatcher?.wake(),
      });
      this.#notifier.start();
    }
    this.#state = 'running';
    this.#log.info({ event: 'started', lanes: this.#leaser.lanes, schema: o.schema }, 'relay running');
  }

  #watchNats(nc: NatsConnection): void {
    (async () => {
      for await (const s of nc.status()) {
        if (s.type === 'disconnect') {
          if (this.#natsUp) this.#log.warn({ event: 'nats-disconnected' }, 'NATS connection lost: claiming paused, reconnecting');
          this.#natsUp = false;
          this.#metrics.natsConnected.set(0);
        } else if (s.type === 'reconnect') {
          if (!this.#natsUp) this.#log.info({ event: 'nats-reconnected' }, 'NATS connection restored');
          this.#natsUp = true;
          this.#metrics.natsConnected.set(1);
          this.#dispatcher?.wake();
        }
      }
    })().catch(() => {});
    nc.closed().then(() => {
      this.#natsUp = false;
      this.#metrics.natsConnected.set(0);
    });
  }

  stop(): Promise<void> {
    this.#stopping ??= this.#stop();
    return this.#stopping;
  }

  async #stop(): Promise<void> {
    this.#abandon();
    if (this.#starting) await this.#starting.catch(() => {});
    if (this.#state === 'failed' || this.#state === 'idle') {
      this.#state = 'stopped';
      await this.#teardown();
      return;
    }
    this.#state = 'draining';
    this.#leaser.drain();
    this.#log.info({ event: 'draining', inFlight: this.#dispatcher?.inflightRows ?? 0 }, 'draining: no new claims, awaiting PubAcks');
    await this.#teardown();
    this.#state = 'stopped';
    this.#log.info({ event: 'stopped' }, 'relay stopped');
  }

  /**
   * Every step runs even when an earlier one fails; once: a failed start tears
   * down and the caller's stop() then gets the same promise (a second
   * `pool.end()` would log "Called end on pool more than once").
   */
  #teardown(): Promise<void> {
    this.#tornDown ??= this.#runTeardown();
    return this.#tornDown;
  }

  async #runTeardown(): Promise<void> {
    const steps: Array<[string, () => Promise<unknown> | undefined]> = [
      ['dispatcher', () => this.#dispatcher?.stop()],
      ['notifier', () => this.#notifier?.stop()],
      ['janitor', () => this.#janitor?.stop()],
      ['leases', () => this.#leaser.stop()],
      [
        'nats',
        () => {
          this.#natsProbe?.stop();
          return drainNats(this.#nc);
        },
      ],
      ['postgres', () => this.#pool.end()],
    ];
    for (const [name, step] of steps) {
      try {
        await step();
      } catch (err) {
        this.#log.warn({ err, step: name }, 'shutdown step failed');
      }
    }
    this.#metrics.lanesOwned.set(0);
  }

  async prune(): Promise<number> {
    if (!this.#janitor)
      throw new ConfigError('maintenance', 'maintenance is off for this relay: prune() needs a relay created with maintenance: true');
    return this.#janitor.prune();
  }
}

/**
 * A relay instance: leases lanes, publishes their outbox rows to JetStream,
 * marks them published after the PubAck. Run 1..N per database.
 */
export function createRelay(options: RelayOptions): Relay {
  return new RelayImpl(options);
}

/** `createRelay` with fault-injection hooks, for tests only (exported as `@ferry/relay/testing`). */
export function createRelayWithHooks(options: RelayOptions, hooks: RelayTestHooks): Relay {
  return new RelayImpl(options, hooks);
}
