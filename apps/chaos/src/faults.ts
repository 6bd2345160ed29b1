// The chaos run's fault injection (one job): fires each fault of the seeded schedule (plan.ts) at its
// committed-event count, on the supervised processes, nats-server, the relays' proxies and PostgreSQL
// backends, and counts what it did for the report.
import { setTimeout as sleep } from 'node:timers/promises';
import type { NatsServer, TcpProxy } from '@ferry/testkit';
import type pg from 'pg';
import { log } from './log.js';
import { type Fault, LEASE_TERM_MS } from './plan.js';
import type { Supervised } from './supervised.js';

export interface FaultCounts {
  kills: number;
  natsRestarts: number;
  backendsTerminated: number;
  pauses: number;
  pausesOverTerm: number;
  partitions: number;
  leaseKills: number;
}

export interface FaultTargets {
  pool: pg.Pool;
  nats: NatsServer;
  /** Each relay's proxies to PostgreSQL and NATS, by relay number. */
  proxies: ReadonlyArray<{ pg: TcpProxy; nats: TcpProxy }>;
  procs: readonly Supervised[];
  runId: string;
  /** Events committed so far: each fault fires at its count, and the log says when. */
  committed: () => number;
}

export class FaultInjector {
  readonly counts: FaultCounts = {
    kills: 0,
    natsRestarts: 0,
    backendsTerminated: 0,
    pauses: 0,
    pausesOverTerm: 0,
    partitions: 0,
    leaseKills: 0,
  };
  readonly #t: FaultTargets;
  readonly #byName: ReadonlyMap<string, Supervised>;

  constructor(targets: FaultTargets) {
    this.#t = targets;
    this.#byName = new Map(targets.procs.map((p) => [p.name, p]));
  }

  /** Fires the faults in order, each once the load has committed its count. */
  async run(faults: readonly Fault[]): Promise<void> {
    for (const f of faults) {
      while (this.#t.committed() < f.atEvent) await sleep(20);
      await this.inject(f);
    }
  }

  async inject(f: Fault): Promise<void> {
    const c = this.counts;
    if (f.kind === 'kill') {
      log(`at ${this.#t.committed()}: SIGKILL ${f.target}, down ${f.downMs} ms`);
      await this.#byName.get(f.target)?.kill(f.downMs);
      c.kills++;
    } else if (f.kind === 'pause') {
      log(`at ${this.#t.committed()}: SIGSTOP ${f.target} for ${f.pauseMs} ms`);
      await this.#byName.get(f.target)?.pause(f.pauseMs);
      c.pauses++;
      if (f.pauseMs > LEASE_TERM_MS) c.pausesOverTerm++;
    } else if (f.kind === 'partition') {
      const proxy = this.#t.proxies[f.relay]?.[f.from];
      log(`at ${this.#t.committed()}: relay-${f.relay} cut off from ${f.from === 'pg' ? 'PostgreSQL' : 'NATS'} for ${f.cutMs} ms`);
      proxy?.blackhole();
      await sleep(f.cutMs);
      // PostgreSQL: the relay's side of the old connections is gone, the server's left open (half-open).
      if (f.from === 'pg') proxy?.halfOpen();
      else proxy?.heal();
      c.partitions++;
    } else if (f.kind === 'lease-kill') {
      // The relay may be between two lease connections (restarted, just woken, cut off): wait up to 3 s for one.
      let terminated = 0;
      for (let tries = 0; tries < 30 && !terminated; tries++) {
        if (tries > 0) await sleep(100);
        terminated = await this.#terminate(
          [...(this.#byName.get(`relay-${f.relay}`)?.instances ?? [])].map((i) => `ferry-relay:${i}:lease:%`),
        );
      }
      c.leaseKills += terminated;
      log(`at ${this.#t.committed()}: terminated relay-${f.relay}'s lease connection (${terminated} backend)`);
    } else if (f.kind === 'nats-restart') {
      log(`at ${this.#t.committed()}: nats-server stopped for ${f.downMs} ms`);
      await this.#t.nats.kill('SIGTERM');
      await sleep(f.downMs);
      await this.#t.nats.restart();
      c.natsRestarts++;
      log('nats-server back');
    } else {
      const p = this.#byName.get(f.target);
      const names = p?.name.startsWith('relay')
        ? [...(p?.instances ?? [])].map((i) => `ferry-relay:${i}%`)
        : [`chaos-${this.#t.runId}-${p?.name}`];
      const terminated = await this.#terminate(names);
      c.backendsTerminated += terminated;
      log(`at ${this.#t.committed()}: terminated ${terminated} PostgreSQL backends of ${f.target}`);
    }
  }

  /** Terminates the PostgreSQL backends whose application_name is LIKE one of `patterns`; returns how many. */
  async #terminate(patterns: string[]): Promise<number> {
    const { rowCount } = await this.#t.pool.query(
      'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE ANY($1::text[]) AND pid <> pg_backend_pid()',
      [patterns],
    );
    return rowCount ?? 0;
  }
}
