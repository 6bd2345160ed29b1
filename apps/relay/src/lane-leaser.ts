import { randomInt } from 'node:crypto';
import { hostname } from 'node:os';
import { laneCountSql } from '@ferry/core';
import pg from 'pg';
import { NotMigratedError } from './errors.js';
import { LIVE_INSTANCES_SQL, TRY_LANES_SQL } from './sql/lanes.js';
import type { Logger } from './types.js';

/**
 * The lease connection's `application_name`: `<app>:<instance>:lease:<pid>@<host>`. `ferry status`
 * reads the relay's own pid and host from it (the backend pid in pg_stat_activity is PostgreSQL's
 * process, not the relay's). PostgreSQL keeps 63 bytes, so the host is cut to fit.
 */
export function leaseApplicationName(applicationName: string): string {
  const base = `${applicationName}:lease:${process.pid}@`;
  return base + hostname().slice(0, Math.max(0, 63 - Buffer.byteLength(base)));
}

/** A stable non-negative 31-bit hash (FNV-1a) of a text: advisory lock namespaces per schema. */
export function lockNamespace(text: string): number {
  let h = 0x811c9dc5;
  for (const byte of Buffer.from(text, 'utf8')) {
    h ^= byte;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h & 0x7fffffff;
}

export interface LaneLeaserOptions {
  databaseUrl: string;
  schema: string;
  /** Quoted schema identifier. */
  schemaSql: string;
  applicationName: string;
  lanesPerInstance: number | 'auto';
  logger: Logger;
}

/**
 * Leases lanes with session advisory locks `(lane namespace, lane)` on a
 * connection of its own, so the leases die with the connection: a crashed
 * instance's lanes are free at once, and every `tick()` of the others (one
 * per poll interval) picks them up.
 *
 * Fair share without a table: each instance also holds one advisory lock
 * `(instance namespace, random id)`; `pg_locks` counts the live instances N,
 * and each instance keeps at most ceil(lanes / N) lanes (or
 * `lanesPerInstance`). An instance over its share releases lanes it has
 * nothing in flight on; an instance under it takes free ones.
 */
export class LaneLeaser {
  readonly #o: LaneLeaserOptions;
  readonly #laneNs: number;
  readonly #instanceNs: number;
  readonly #instanceKey = randomInt(1, 2 ** 31 - 1);
  #client: pg.Client | undefined;
  #connecting: Promise<pg.Client> | undefined;
  #laneCount = 0;
  #lanes: number[] = [];
  #live = 1;
  #rotation = 0;
  #lost = false;

  constructor(options: LaneLeaserOptions) {
    this.#o = options;
    this.#laneNs = lockNamespace(`ferry:lanes:${options.schema}`);
    this.#instanceNs = lockNamespace(`ferry:relays:${options.schema}`);
  }

  /** Lanes held now, ascending. */
  get lanes(): readonly number[] {
    return this.#lanes;
  }

  get liveInstances(): number {
    return this.#live;
  }

  get connected(): boolean {
    return this.#client !== undefined;
  }

  async #connect(): Promise<pg.Client> {
    if (this.#client) return this.#client;
    this.#connecting ??= (async () => {
      const client = new pg.Client({
        connectionString: this.#o.databaseUrl,
        application_name: leaseApplicationName(this.#o.applicationName),
        keepAlive: true,
      });
      client.on('error', (err) => this.#dropped(client, err));
      client.on('end', () => this.#dropped(client, new Error('lease connection ended')));
      try {
        await client.connect();
        const { rows } = await client.query<{ value: string }>(laneCountSql(this.#o.schemaSql));
        const n = Number(rows[0]?.value);
        if (!Number.isInteger(n) || n < 1)
          throw new NotMigratedError(`no lane count in ${this.#o.schemaSql}.settings: run ferry migrate first`);
        this.#laneCount = n;
        await client.query('SELECT pg_advisory_lock($1::int, $2::int)', [this.#instanceNs, this.#instanceKey]);
      } catch (err) {
        client.removeAllListeners('end');
        client.on('error', () => {});
        await client.end().catch(() => {});
        throw err;
      }
      this.#client = client;
      if (this.#lost) this.#o.logger.info({ event: 'lease-connection-restored' }, 'lease connection restored');
      this.#lost = false;
      return client;
    })().finally(() => {
      this.#connecting = undefined;
    });
    return this.#connecting;
  }

  #dropped(client: pg.Client, err: Error): void {
    if (this.#client !== client) return;
    this.#client = undefined;
    if (this.#lanes.length > 0 || !this.#lost) {
      this.#o.logger.warn({ err, lanes: this.#lanes }, 'lease connection lost: all lanes dropped until it is back');
    }
    this.#lanes = [];
    this.#lost = true;
    client.on('error', () => {});
  }

  /**
   * Re-checks the leases: counts live instances, releases lanes over the fair
   * share that `busy` says have nothing in flight, takes free lanes up to it.
   * Returns the lanes held. Never throws: a lost connection means no lanes.
   */
  async tick(busy: (lane: number) => boolean = () => false): Promise<readonly number[]> {
    try {
      const client = await this.#connect();
      const live = await client.query<{ n: number }>(LIVE_INSTANCES_SQL, [this.#instanceNs]);
      this.#live = Math.max(1, live.rows[0]?.n ?? 1);
      const share =
        this.#o.lanesPerInstance === 'auto' ? Math.ceil(this.#laneCount / this.#live) : Math.min(this.#o.lanesPerInstance, this.#laneCount);
      if (this.#lanes.length > share) {
        const extra = this.#lanes.filter((l) => !busy(l)).slice(share - this.#lanes.length);
        for (const lane of extra) await client.query('SELECT pg_advisory_unlock($1::int, $2::int)', [this.#laneNs, lane]);
        if (extra.length > 0) {
          const gone = new Set(extra);
          this.#lanes = this.#lanes.filter((l) => !gone.has(l));
        }
      } else if (this.#lanes.length < share) {
        this.#rotation = (this.#rotation + 1) % this.#laneCount;
        const start = (this.#instanceKey + this.#rotation) % this.#laneCount;
        const { rows } = await client.query<{ lane: number }>(TRY_LANES_SQL, [
          this.#laneNs,
          this.#laneCount,
          this.#lanes,
          start,
          share - this.#lanes.length,
        ]);
        if (rows.length > 0) this.#lanes = [...this.#lanes, ...rows.map((r) => r.lane)].sort((a, b) => a - b);
      }
    } catch (err) {
      if (!this.#lost) this.#o.logger.warn({ err }, 'lane lease check failed: holding no lanes until the database answers');
      this.#lost = true;
      await this.stop();
    }
    return this.#lanes;
  }

  /** Releases every lease by closing the connection (a check that failed does the same, and tries again later). */
  async stop(): Promise<void> {
    const client = this.#client;
    this.#client = undefined;
    this.#lanes = [];
    if (client) {
      client.removeAllListeners('end');
      client.on('error', () => {});
      await client.end().catch(() => {});
    }
  }
}
