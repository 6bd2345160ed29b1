import type { FerryEvent } from '@ferry/core';
import type { InboxMetrics } from './metrics.js';
import type { CompiledInboxOptions } from './options.js';
import { markOutcome } from './tracing.js';
import type { InboxCounts, InboxReport, ParkReason } from './types.js';

/** What the gate (gate.ts) made of one event. */
export type GateOutcome =
  | { kind: 'applied'; durationMs: number }
  | { kind: 'held'; recorded: bigint }
  | { kind: 'stale'; recorded: bigint }
  | { kind: 'duplicate' }
  | { kind: 'gap'; recorded: bigint }
  | { kind: 'park'; reason: ParkReason; error: string };

/** One parked event as `onEvent` reports it. */
export interface ParkedReport {
  id: string | undefined;
  key: string | undefined;
  reason: ParkReason;
  error: string;
  jobId: string | null;
}

export function errorText(err: unknown): string {
  if (err instanceof Error) return `${err.name}: ${err.message}`;
  return String(err);
}

/** Every report also counts in the metrics and sets the outcome on its process span (tracing.ts), before the caller's hook. */
export function observed(onEvent: (report: InboxReport) => void, metrics: InboxMetrics | undefined): (report: InboxReport) => void {
  return (report) => {
    metrics?.observe(report);
    markOutcome(report);
    onEvent(report);
  };
}

/**
 * Turns outcomes into the inbox's counts and `onEvent` reports, the same way
 * for the stream, the stored early versions and the park worker.
 */
export class OutcomeReporter {
  readonly #o: CompiledInboxOptions;
  readonly #counts: InboxCounts;

  constructor(o: CompiledInboxOptions, counts: InboxCounts) {
    this.#o = o;
    this.#counts = counts;
  }

  /** Counts and reports an outcome that ends the event's delivery (applied, stale, duplicate); `false` for any other, counting nothing. */
  settled(outcome: GateOutcome, event: FerryEvent, fromPark: boolean): boolean {
    const o = this.#o;
    const base = { consumer: o.consumer, id: event.id, key: event.key, version: event.version };
    switch (outcome.kind) {
      case 'applied':
        this.#counts.applied++;
        o.onEvent({ kind: 'applied', ...base, type: event.type, durationMs: outcome.durationMs, fromPark });
        return true;
      case 'stale':
        this.stale(event, outcome.recorded);
        return true;
      case 'duplicate':
        this.#counts.duplicate++;
        o.onEvent({ kind: 'duplicate', ...base });
        return true;
      default:
        return false;
    }
  }

  stale(event: FerryEvent, recorded: bigint): void {
    const o = this.#o;
    this.#counts.stale++;
    o.onEvent({ kind: 'stale', consumer: o.consumer, id: event.id, key: event.key, version: event.version, recorded });
  }

  gap(event: FerryEvent, recorded: bigint): void {
    const o = this.#o;
    this.#counts.gap++;
    o.onEvent({ kind: 'gap', consumer: o.consumer, id: event.id, key: event.key, version: event.version, recorded, waitedMs: 0 });
  }

  /** A handler (or the gate) threw: counted, reported and logged. */
  failed(event: FerryEvent, attempt: number, error: unknown, willRetry: boolean): void {
    const o = this.#o;
    this.#counts.failed++;
    o.onEvent({ kind: 'failed', consumer: o.consumer, id: event.id, key: event.key, version: event.version, attempt, error, willRetry });
    o.logger.warn({ err: error, id: event.id, key: event.key, attempt }, 'inbox handler failed');
  }

  parked(p: ParkedReport): void {
    const o = this.#o;
    this.#counts.parked++;
    o.onEvent({ kind: 'parked', consumer: o.consumer, id: p.id, key: p.key, reason: p.reason, error: p.error, jobId: p.jobId });
  }
}
