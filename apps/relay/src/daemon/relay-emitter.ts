import { EventEmitter } from 'node:events';
import type { RelayEvents } from '../types.js';

/**
 * The relay's events, typed: `emit` takes only a `RelayEvents` name with its
 * payload and `on` hands the listener that payload, so an event cannot be
 * emitted under a misspelt name or with the wrong fields.
 */
export class RelayEmitter {
  readonly #emitter = new EventEmitter();

  on<K extends keyof RelayEvents>(event: K, listener: (e: RelayEvents[K]) => void): void {
    this.#emitter.on(event, listener);
  }

  emit<K extends keyof RelayEvents>(event: K, payload: RelayEvents[K]): void {
    this.#emitter.emit(event, payload);
  }
}

/**
 * Hooks for fault-injection tests, not part of the documented options: reach
 * them through `@ferry/relay/testing`. Production code never sets them.
 */
export interface RelayTestHooks {
  /** A segment's PubAcks are in (`acked` of `rows`) and its rows are not marked published yet. */
  afterAck?(rows: number, acked: number): void;
  /** A row was handed to the NATS client (its lease checked), before the client writes its buffer to the socket. */
  afterSend?(row: { key: string; lane: number }): void;
}
