import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { type InboxReport, PARK_REASONS } from './types.js';

/** Outcomes of `ferry_inbox_messages_total`: the `onEvent` report kinds. */
export const INBOX_OUTCOMES = ['applied', 'stale', 'duplicate', 'gap', 'failed', 'parked'] as const;

/** The consumer's JetStream counters, as sampled. */
export interface ConsumerLag {
  /** Messages in the stream not yet delivered to the consumer. */
  pending: number;
  /** Delivered, not yet acknowledged. */
  ackPending: number;
  /** Delivered more than once and not yet acknowledged. */
  redelivered: number;
}

const DURATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/**
 * A metric of the registry by name, created on first use: several inboxes (one
 * per consumer) share one registry and one set of metrics, told apart by the
 * `consumer` label. prom-client refuses to register a name twice.
 */
function shared<T>(registry: Registry, name: string, create: () => T): T {
  return (registry.getSingleMetric(name) as T | undefined) ?? create();
}

/**
 * Per in-flight gauge, how each inbox on it counts its messages: the gauge is
 * read at scrape time (`collect`), and shared by the registry's inboxes, so it
 * asks each of them.
 */
const inFlightReaders = new WeakMap<Gauge<'consumer'>, Map<string, () => number>>();

/**
 * The inbox's Prometheus metrics in the caller's registry (`createInbox({ metrics })`),
 * named and labelled as the relay's are: `ferry_inbox_*`, a `consumer` label,
 * no label of unbounded values (no key, id or type).
 */
export class InboxMetrics {
  readonly #consumer: string;
  readonly #messages: Counter<'consumer' | 'outcome'>;
  readonly #parked: Counter<'consumer' | 'reason'>;
  readonly #handler: Histogram<'consumer'>;
  readonly #gateToCommit: Histogram<'consumer'>;
  readonly #inFlight: Gauge<'consumer'>;
  readonly #pending: Gauge<'consumer'>;
  readonly #ackPending: Gauge<'consumer'>;
  readonly #redelivered: Gauge<'consumer'>;

  constructor(registry: Registry, consumer: string, inFlight: () => number) {
    this.#consumer = consumer;
    const registers = [registry];
    type Config = { name: string; help: string };
    const counter = <L extends string>(c: Config, labels: L[]) =>
      shared(registry, c.name, () => new Counter<L>({ ...c, labelNames: labels, registers }));
    const histogram = (c: Config) =>
      shared(registry, c.name, () => new Histogram<'consumer'>({ ...c, labelNames: ['consumer'], buckets: DURATION_BUCKETS, registers }));
    const gauge = (c: Config) => shared(registry, c.name, () => new Gauge<'consumer'>({ ...c, labelNames: ['consumer'], registers }));
    this.#messages = counter(
      { name: 'ferry_inbox_messages_total', help: 'Messages settled by outcome (applied, stale, duplicate, gap, failed, parked)' },
      ['consumer', 'outcome'],
    );
    for (const outcome of INBOX_OUTCOMES) this.#messages.inc({ consumer, outcome }, 0);
    this.#parked = counter({ name: 'ferry_inbox_parked_total', help: 'Events sent to the parking lot, by reason' }, ['consumer', 'reason']);
    for (const reason of PARK_REASONS) this.#parked.inc({ consumer, reason }, 0);
    this.#handler = histogram({ name: 'ferry_inbox_handler_duration_seconds', help: "The handler's own run time, per applied message" });
    this.#gateToCommit = histogram({
      name: 'ferry_inbox_gate_to_commit_seconds',
      help: 'From BEGIN and the version gate to COMMIT, per applied message (the time the key row lock is held)',
    });
    this.#inFlight = shared(
      registry,
      'ferry_inbox_in_flight',
      () =>
        new Gauge<'consumer'>({
          name: 'ferry_inbox_in_flight',
          help: 'Messages received and not yet settled (queued behind their key or running)',
          labelNames: ['consumer'],
          registers,
          collect() {
            for (const [c, read] of inFlightReaders.get(this) ?? []) this.set({ consumer: c }, read());
          },
        }),
    );
    const readers = inFlightReaders.get(this.#inFlight) ?? new Map<string, () => number>();
    inFlightReaders.set(this.#inFlight, readers.set(consumer, inFlight));
    this.#pending = gauge({
      name: 'ferry_inbox_consumer_pending',
      help: 'JetStream consumer num_pending: stream messages not yet delivered (the lag), sampled',
    });
    this.#ackPending = gauge({
      name: 'ferry_inbox_consumer_ack_pending',
      help: 'JetStream consumer num_ack_pending: delivered, not yet acknowledged, sampled',
    });
    this.#redelivered = gauge({
      name: 'ferry_inbox_consumer_redelivered',
      help: 'JetStream consumer num_redelivered: delivered more than once, not yet acknowledged, sampled',
    });
  }

  /** Counts a report (called for every `onEvent` report). */
  observe(report: InboxReport): void {
    this.#messages.inc({ consumer: this.#consumer, outcome: report.kind });
    if (report.kind === 'parked') this.#parked.inc({ consumer: this.#consumer, reason: report.reason });
  }

  handler(ms: number): void {
    this.#handler.observe({ consumer: this.#consumer }, ms / 1000);
  }

  gateToCommit(ms: number): void {
    this.#gateToCommit.observe({ consumer: this.#consumer }, ms / 1000);
  }

  lag(lag: ConsumerLag): void {
    const labels = { consumer: this.#consumer };
    this.#pending.set(labels, lag.pending);
    this.#ackPending.set(labels, lag.ackPending);
    this.#redelivered.set(labels, lag.redelivered);
  }

  /** Drops this consumer's gauges once it stops: a stopped inbox has no lag or in-flight messages to report. */
  remove(): void {
    inFlightReaders.get(this.#inFlight)?.delete(this.#consumer);
    for (const g of [this.#pending, this.#ackPending, this.#redelivered, this.#inFlight]) g.remove({ consumer: this.#consumer });
  }
}

/**
 * Samples the consumer's pending and ack-pending counts every `everyMs` (one
 * JetStream API request each time, whatever the scrape rate), at once and then
 * on the interval. Returns the function that stops it and drops the samples.
 */
export function startLagSampler(
  metrics: InboxMetrics,
  read: () => Promise<{ num_pending: number; num_ack_pending: number; num_redelivered: number }>,
  everyMs: number,
  logger: { warn(obj: object, msg?: string): void },
): () => void {
  let failing = false;
  let busy = false; // a slow answer is not asked for again meanwhile
  let stopped = false; // an answer that arrives after stop must not bring the dropped gauges back
  const sample = () => {
    if (busy || stopped) return;
    busy = true;
    void read()
      .then((info) => {
        failing = false;
        if (stopped) return;
        metrics.lag({ pending: info.num_pending, ackPending: info.num_ack_pending, redelivered: info.num_redelivered });
      })
      .catch((err: unknown) => {
        // Once per outage: the gauges keep their last value meanwhile.
        if (!failing) logger.warn({ err }, 'inbox could not read its consumer info for the lag metrics; retrying every interval');
        failing = true;
      })
      .finally(() => {
        busy = false;
      });
  };
  sample();
  const timer = setInterval(sample, everyMs);
  timer.unref();
  return () => {
    stopped = true;
    clearInterval(timer);
    metrics.remove();
  };
}
