// The lease state in one file (still over ~350 lines): the leases held, their epochs, the monotonic clock
// that ends them and the statements that take, renew and release them change one state, and every rule of
// when a lane may be sent on (holds, the lease connection's end, the fair share) reads all of it. What
// needs none of that state has a file of its own: the connection the statements run on
// (lease-connection.ts), the text of a take (lease-takeover.ts), the advisory locks that keep relays from
// before leases out (lease-legacy-locks.ts) and the statements themselves (../sql/leases.ts).
import { FERRY_RELEASE, laneCountSql, RELAY_PROTOCOL, SQLSTATE, sqlState } from '@ferry/core';
import type pg from 'pg';
import { NotMigratedError } from '../errors.js';
import { type LeaseStatements, leaseStatements } from '../sql/leases.js';
import type { Logger } from '../types.js';
import { LeaseConnection, leaseApplicationName } from './lease-connection.js';
import { LegacyLaneLocks } from './lease-legacy-locks.js';
import { logLeaseTaken, type TakenLease, type TakeoverRule } from './lease-takeover.js';

/**
 * The part of the term a holder keeps for itself: it treats a lease as lost
 * this long before the database would let another instance take it, so a
 * late check (a pause between the check and the send) still falls inside
 * the term. A quarter: renewals come every third, so two in a row may fail.
 */
export function leaseSafetyMarginMs(termMs: number): number {
  return Math.ceil(termMs / 4);
}

export interface LaneLeaserOptions {
  databaseUrl: string;
  /** Quoted schema identifier. */
  schemaSql: string;
  /** The owner name written in the lease rows: the relay's instance id. */
  instance: string;
  applicationName: string;
  lanesPerInstance: number | 'auto';
  /** The lease term: a lease not renewed for this long may be taken by another instance. */
  leaseTermMs: number;
  /** Extra `pg` client settings of the lease connection (connect timeout, keepalive, server options). */
  pg?: pg.PoolConfig;
  /** False while this instance cannot do its work (NATS unreachable): it gives its lanes up and takes none. */
  healthy?: () => boolean;
  /** A lane was taken from another instance (`rule`: what freed it). */
  onTakeover?: (lane: number, rule: TakeoverRule) => void;
  /** Lanes this instance no longer holds (whatever the cause), right when it knows. */
  onLost?: (lanes: readonly number[]) => void;
  /**
   * The advisory lock namespace relays from before leases took lanes in (`lockNamespace('ferry:lanes:<schema>')`):
   * this instance holds those locks for every lane it can get, so such a relay started beside it finds none.
   */
  legacyLaneNamespace?: number;
  logger: Logger;
}

interface Held {
  epoch: string;
  /** performance.now() at the start of the statement that last confirmed this lease. */
  confirmedAt: number;
}

/**
 * Leases lanes as rows of `relay_leases` with a term (outbox migration
 * 000010). The database's clock alone decides when a term ends (`now()`); the
 * holder renews all its lanes in one statement every third of the term, and
 * stops by its own monotonic clock: a lane whose last confirmed renewal
 * started more than the term less a safety margin ago counts as lost
 * (`holds()`), before any other instance may take it. So an instance that
 * is frozen, cut off from PostgreSQL either way, or stuck in a statement
 * loses its lanes within the term, and a live one takes them on its next
 * poll after that. Nothing ever waits on a lock: a take skips rows another
 * take holds.
 *
 * Fair share: each instance renews a heartbeat row in `relay_instances` with
 * its leases; the unexpired rows count the live instances N, and each keeps
 * at most ceil(lanes / N) lanes (or `lanesPerInstance`). An instance over its
 * share releases lanes it has nothing in flight on; one under it takes free
 * or expired ones.
 */
export class LaneLeaser {
  readonly #o: LaneLeaserOptions;
  readonly #conn: LeaseConnection;
  readonly #marginMs: number;
  readonly #sql: LeaseStatements;
  readonly #held = new Map<number, Held>();
  /** Lanes over the fair share, to be released once nothing is in flight on them: no new claims meanwhile. */
  readonly #releasing = new Set<number>();
  #laneCount = 0;
  #live = 1;
  #free = 0;
  #rotation = Math.floor(Math.random() * 1024);
  #lastRenewAt = Number.NEGATIVE_INFINITY;
  readonly #legacy: LegacyLaneLocks;
  #failing = false;
  #stopped = false;
  /** Stopping (drain()): no lane is taken any more, and each is given up once nothing is in flight on it. */
  #draining = false;
  /** Unhealthy: lanes released and heartbeat deleted until healthy again. */
  #benched = false;
  #loop: Promise<void> | undefined;
  #wake: (() => void) | undefined;

  constructor(options: LaneLeaserOptions) {
    this.#o = options;
    this.#marginMs = leaseSafetyMarginMs(options.leaseTermMs);
    this.#sql = leaseStatements(options.schemaSql);
    this.#legacy = new LegacyLaneLocks(options.legacyLaneNamespace);
    this.#conn = new LeaseConnection({
      databaseUrl: options.databaseUrl,
      applicationName: options.applicationName,
      leaseTermMs: options.leaseTermMs,
      ...(options.pg ? { pg: options.pg } : {}),
      // A new connection: the heartbeat must name its backend before anything else, or the
      // others would think this instance gone and take its lanes.
      onNew: () => {
        this.#lastRenewAt = Number.NEGATIVE_INFINITY;
        this.#legacy.forget();
      },
      onEnded: () => this.#connectionEnded(),
    });
  }

  /** Lanes held now by this instance's own clock, ascending, less those being released: the lanes to claim from. */
  get lanes(): readonly number[] {
    this.#expire();
    return [...this.#held.keys()].filter((l) => !this.#releasing.has(l)).sort((a, b) => a - b);
  }

  /** Whether `lane` is held and not being released: a chain goes on fetching its key's next rows only then. */
  keeps(lane: number): boolean {
    return this.holds(lane) && !this.#releasing.has(lane);
  }

  get liveInstances(): number {
    return this.#live;
  }

  /** The database answered the last lease statement. */
  get connected(): boolean {
    return !this.#failing && this.#laneCount > 0;
  }

  /**
   * Whether this instance holds `lane` now, by its own monotonic clock: the
   * check before every send and every continuation. False from the moment
   * the last confirmed renewal is older than the term less the margin, even
   * if no tick has run since (a process woken from a freeze sees it at once).
   */
  holds(lane: number): boolean {
    const h = this.#held.get(lane);
    return h !== undefined && performance.now() - h.confirmedAt < this.#o.leaseTermMs - this.#marginMs;
  }

  /** The epoch `lane` is held under (undefined when not held): every mark of its rows carries it. */
  epoch(lane: number): string | undefined {
    return this.holds(lane) ? this.#held.get(lane)?.epoch : undefined;
  }

  /** Drops the lanes this instance's clock says are lost. */
  #expire(): void {
    for (const lane of this.#held.keys()) {
      if (!this.holds(lane)) this.#lost([lane], 'not renewed within the term (by this instance’s clock)');
    }
  }

  /** `info` for a lane given up on purpose (over the share, stopping): only a loss the instance did not choose warns. */
  #lost(lanes: number[], reason: string, level: 'warn' | 'info' = 'warn'): void {
    const gone: number[] = [];
    for (const lane of lanes) {
      const h = this.#held.get(lane);
      if (!h) continue;
      this.#held.delete(lane);
      this.#releasing.delete(lane);
      gone.push(lane);
      this.#o.logger[level]({ event: 'lease-lost', lane, epoch: h.epoch, reason }, `lease lost: lane ${lane} epoch ${h.epoch} (${reason})`);
    }
    if (gone.length > 0) this.#o.onLost?.(gone);
  }

  /**
   * The lease connection ended or failed (terminated, reset, a statement
   * timed out and the connection was dropped): every lane is given up at
   * once. Its heartbeat names that connection's backend, so to the others
   * this instance is gone, and they take its lanes once its fence has passed.
   */
  #connectionEnded(): void {
    this.#lastRenewAt = Number.NEGATIVE_INFINITY;
    this.#legacy.forget();
    this.#lost([...this.#held.keys()], 'the lease connection ended: the others may take the lane once its fence has passed');
  }

  async #laneCountOnce(): Promise<void> {
    if (this.#laneCount > 0) return;
    const rows = await this.#conn.query<{ value: string }>(laneCountSql(this.#o.schemaSql), []);
    const n = Number(rows[0]?.value);
    if (!Number.isInteger(n) || n < 1)
      throw new NotMigratedError(`no lane count in ${this.#o.schemaSql}.settings: run ferry migrate first`);
    this.#laneCount = n;
    await this.#conn.query(this.#sql.prune, []);
  }

  /**
   * One poll's lease work: renews every third of the term (with the
   * heartbeat), otherwise reads the counts; releases lanes over the fair
   * share that `busy` says have nothing in flight; takes free or expired
   * lanes up to it. Returns the lanes held. Never throws: a database that
   * does not answer only means no renewal, and the clock ends the leases.
   */
  async tick(busy: (lane: number) => boolean = () => false): Promise<readonly number[]> {
    if (this.#stopped) return [];
    this.#expire();
    try {
      await this.#laneCountOnce();
      if (this.#o.healthy && !this.#o.healthy()) {
        if (this.#held.size > 0) await this.#release([...this.#held.keys()], 'this instance cannot reach NATS');
        // Out of the live count too, so the others' fair share covers the lanes given up at once;
        // the next renewal (once healthy) writes the heartbeat again.
        if (!this.#benched) await this.#conn.query(this.#sql.forget, [this.#o.instance]);
        this.#benched = true;
        this.#lastRenewAt = Number.NEGATIVE_INFINITY;
        return this.lanes;
      }
      this.#benched = false;
      const now = performance.now();
      if (now - this.#lastRenewAt >= this.#o.leaseTermMs / 3) await this.#renew(now);
      else {
        const rows = await this.#conn.query<{ live: number; free: number }>(this.#sql.counts, [this.#o.instance]);
        this.#live = Math.max(1, rows[0]?.live ?? 1);
        this.#free = rows[0]?.free ?? 0;
        // That statement ran on a new connection: renew now, so the heartbeat names it.
        if (this.#lastRenewAt === Number.NEGATIVE_INFINITY) await this.#renew(performance.now());
      }
      if (this.#draining) {
        // Stopping: lanes with nothing in flight go now, so the others take them on their next poll instead
        // of when this instance has drained; busy ones stay renewed until their chains end.
        const idle = [...this.#held.keys()].filter((l) => !busy(l));
        if (idle.length > 0) await this.#release(idle, 'this instance is stopping', 'info');
        this.#failing = false;
        return this.lanes;
      }
      const share =
        this.#o.lanesPerInstance === 'auto' ? Math.ceil(this.#laneCount / this.#live) : Math.min(this.#o.lanesPerInstance, this.#laneCount);
      if (this.#held.size > share) {
        // Over the share: lanes with nothing in flight go at once; busy ones are claimed from no more and go
        // when their chains end (under a steady backlog a lane is never idle between two claims).
        const keys = [...this.#held.keys()].filter((l) => !this.#releasing.has(l));
        const extra = [...keys.filter((l) => !busy(l)), ...keys.filter((l) => busy(l))];
        for (const l of extra.slice(0, Math.max(0, this.#held.size - share - this.#releasing.size))) this.#releasing.add(l);
        const now = [...this.#releasing].filter((l) => !busy(l));
        if (now.length > 0) await this.#release(now, `over the fair share of ${share} with ${this.#live} instances`, 'info');
      } else if (this.#releasing.size > 0) {
        this.#releasing.clear(); // back within the share (an instance left): keep them
      }
      if (this.#held.size < share && this.#free > 0) {
        await this.#take(share - this.#held.size);
      }
      if (this.#failing) this.#o.logger.info({ event: 'lease-database-restored' }, 'lease statements answer again');
      this.#failing = false;
    } catch (err) {
      if (!this.#failing && sqlState(err) === SQLSTATE.relayBelowFloor) {
        // The schema was migrated by a newer release whose relays must not work beside this one.
        this.#o.logger.error({ err, event: 'relay-below-floor' }, `${(err as Error).message}: this instance takes no lane`);
      } else if (!this.#failing) {
        this.#o.logger.warn(
          { err, lanes: this.lanes },
          `lane lease check failed: the lanes held end with their term (${this.#o.leaseTermMs} ms) unless a renewal gets through`,
        );
      }
      this.#failing = true;
    }
    return this.lanes;
  }

  async #renew(startedAt: number): Promise<void> {
    this.#lastRenewAt = startedAt;
    const held = [...this.#held.entries()];
    const rows = await this.#conn.query<{ live: number; free: number; lanes: number[] }>(this.#sql.renew, [
      this.#o.instance,
      leaseApplicationName(this.#o.applicationName),
      this.#o.leaseTermMs,
      held.map(([lane]) => lane),
      held.map(([, h]) => h.epoch),
      FERRY_RELEASE,
      RELAY_PROTOCOL,
    ]);
    const r = rows[0];
    this.#live = Math.max(1, r?.live ?? 1);
    this.#free = r?.free ?? 0;
    const renewed = new Set((r?.lanes ?? []).map(Number));
    for (const [lane, h] of held) {
      // Only leases still in the map are confirmed: one the clock dropped meanwhile stays dropped.
      if (renewed.has(lane) && this.#held.get(lane) === h) h.confirmedAt = startedAt;
    }
    this.#lost(
      held.filter(([lane]) => !renewed.has(lane)).map(([lane]) => lane),
      'taken by another instance after its term ran out',
    );
    await this.#legacy.topUp(this.#conn, this.#laneCount);
  }

  async #take(n: number): Promise<void> {
    this.#rotation = (this.#rotation + 1) % this.#laneCount;
    const startedAt = performance.now();
    const rows = await this.#conn.query<TakenLease>(this.#sql.take, [
      this.#o.instance,
      this.#o.leaseTermMs,
      this.#rotation,
      this.#laneCount,
      n,
    ]);
    for (const r of rows) {
      this.#held.set(r.lane, { epoch: r.epoch, confirmedAt: startedAt });
      const takeover = r.prev !== null && r.prev !== this.#o.instance;
      if (takeover) this.#o.onTakeover?.(r.lane, r.rule);
      logLeaseTaken(this.#o.logger, r, this.#o.instance);
    }
    this.#free = Math.max(0, this.#free - rows.length);
  }

  async #release(lanes: number[], reason: string, level: 'warn' | 'info' = 'warn'): Promise<void> {
    // Dropped here first: whatever the statement does, this instance no longer acts on them.
    this.#lost(lanes, `released: ${reason}`, level);
    await this.#conn.query(this.#sql.release, [this.#o.instance, lanes]);
  }

  /**
   * Ticks on a timer of its own, every poll interval (at most a sixth of the
   * term), so renewals do not wait for the claim loop (a relay polling once a
   * minute still renews in time). A blocked event loop blocks the timer too:
   * then the clock ends the leases, as it should. `changed` runs when the
   * lanes held change.
   */
  start(intervalMs: number, busy: (lane: number) => boolean, changed: (lanes: readonly number[]) => void): void {
    if (this.#loop || this.#stopped) return;
    const every = Math.max(10, Math.min(intervalMs, Math.floor(this.#o.leaseTermMs / 6)));
    this.#loop = (async () => {
      let before = this.lanes.join();
      while (!this.#stopped) {
        const lanes = await this.tick(busy);
        if (lanes.join() !== before) {
          before = lanes.join();
          changed(lanes);
        }
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, every);
          this.#wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
    })();
  }

  /**
   * The instance is stopping: from now on it takes no lane (a lane another
   * stopping instance gives up would otherwise come here, and stay until
   * this one has drained), and gives each lane up as soon as nothing is in
   * flight on it. Renewals go on for the lanes still busy.
   */
  drain(): void {
    this.#draining = true;
    this.#wake?.();
  }

  /** Releases every lease and the heartbeat, so the others take the lanes on their next poll. */
  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#wake?.();
    await this.#loop;
    const lanes = [...this.#held.keys()];
    this.#held.clear();
    try {
      if (this.#laneCount > 0) {
        await this.#conn.query(this.#sql.release, [this.#o.instance, lanes]);
        await this.#conn.query(this.#sql.forget, [this.#o.instance]);
      }
    } catch (err) {
      this.#o.logger.warn({ err, lanes }, 'could not release the leases: they end with their term');
    } finally {
      await this.#conn.end();
    }
  }
}
