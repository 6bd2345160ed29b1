import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { FAILURE_REASONS } from '../types.js';

export interface BacklogReading {
  pending: number;
  oldestSeconds: number;
  dead: number;
  /** Keys whose first unpublished row failed (backing off or dead): nothing later of theirs is sent. */
  blockedKeys: number;
}

/** The relay's Prometheus metrics, in a registry of its own (several relays may share a process in tests). */
export class RelayMetrics {
  readonly registry = new Registry();
  readonly published: Counter;
  readonly failures: Counter<'reason'>;
  readonly batchDuration: Histogram;
  readonly commitToAck: Histogram;
  readonly lanesOwned: Gauge;
  readonly leaseTakeovers: Counter;
  readonly lateWrites: Counter;
  readonly claims: Counter;
  readonly natsConnected: Gauge;
  readonly circuitState: Gauge;

  constructor(readBacklog: () => Promise<BacklogReading>) {
    const registers = [this.registry];
    this.published = new Counter({
      name: 'ferry_events_published_total',
      help: 'Outbox rows acknowledged by JetStream and marked',
      registers,
    });
    this.failures = new Counter({
      name: 'ferry_publish_failures_total',
      help: 'Failed publish attempts, by reason',
      labelNames: ['reason'],
      registers,
    });
    for (const reason of FAILURE_REASONS) this.failures.inc({ reason }, 0);
    this.batchDuration = new Histogram({
      name: 'ferry_batch_duration_seconds',
      help: "From claim to marked, per key chain (a key's rows sent one PubAck at a time)",
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers,
    });
    this.commitToAck = new Histogram({
      name: 'ferry_commit_to_ack_seconds',
      help: 'From the row insert (created_at) to its PubAck',
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers,
    });
    this.leaseTakeovers = new Counter({
      name: 'ferry_relay_lease_takeovers_total',
      help: 'Lanes this instance took from an instance whose lease term ran out (frozen, cut off or stuck)',
      registers,
    });
    this.lateWrites = new Counter({
      name: 'ferry_relay_late_writes_total',
      help: 'Messages whose bytes may have left after their lease ended: the process paused between the wire fence check and the socket write (logged with their ids)',
      registers,
    });
    this.claims = new Counter({
      name: 'ferry_relay_claims_total',
      help: 'Claim statements sent (each walks every pending key of its lanes): events published ÷ claims is the rows a claim found',
      registers,
    });
    this.lanesOwned = new Gauge({ name: 'ferry_lanes_owned', help: 'Lanes this instance leases', registers });
    this.natsConnected = new Gauge({ name: 'ferry_nats_connected', help: '1 while connected to NATS', registers });
    this.circuitState = new Gauge({ name: 'ferry_circuit_state', help: 'NATS circuit breaker: 0 closed, 1 open, 2 half-open', registers });
    let reading: Promise<BacklogReading | undefined> | undefined;
    // One query per scrape serves the backlog gauges.
    const read = () => {
      reading ??= readBacklog()
        .catch(() => undefined)
        .finally(() => setTimeout(() => (reading = undefined), 100).unref());
      return reading;
    };
    const backlogGauge = (config: { name: string; help: string }, figure: (r: BacklogReading) => number) =>
      new Gauge({
        ...config,
        registers,
        async collect() {
          const r = await read();
          if (r) this.set(figure(r));
        },
      });
    backlogGauge({ name: 'ferry_outbox_backlog', help: 'Unpublished, not dead outbox rows (all lanes)' }, (r) => r.pending);
    backlogGauge(
      { name: 'ferry_outbox_oldest_pending_seconds', help: 'Age of the oldest unpublished, not dead row' },
      (r) => r.oldestSeconds,
    );
    backlogGauge({ name: 'ferry_dead_events', help: 'Dead rows waiting for ferry dlq retry or discard' }, (r) => r.dead);
    backlogGauge(
      {
        name: 'ferry_blocked_keys',
        help: 'Keys held behind a failed row (backing off or dead): their later events wait, other keys go on',
      },
      (r) => r.blockedKeys,
    );
  }
}
