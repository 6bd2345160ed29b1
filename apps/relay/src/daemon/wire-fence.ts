import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from '../types.js';

/** A lane under the epoch a message was sent for. */
export interface LeaseMark {
  lane: number;
  epoch: string;
}

/**
 * Not sent: the wire fence found the message's lease stale when its bytes were about to leave, and
 * dropped them (or closed the connection while its PubAck was awaited). The row was not sent by
 * this instance as far as the lease is concerned: its lane's holder claims it again.
 */
export class FencedError extends Error {
  override readonly name = 'FencedError';
  readonly code = 'FERRY_FENCED';
}

/** The part of nats.js's protocol handler the fence wraps (nats-core 3.x, `ProtocolHandler`). */
interface Protocol {
  flushPending(): void;
  outbound: { size(): number; reset(): void };
  transport?: { isClosed?: boolean; socket?: { destroy(): void; resetAndDestroy?: () => void; destroyed?: boolean } };
}

export interface WireFenceOptions {
  /** Whether `lane` is held under `epoch` now, by this instance's monotonic clock (`LaneLeaser.holds`). */
  holds: (lane: number, epoch: string) => boolean;
  logger: Logger;
}

/**
 * The last lease check, where the bytes leave (issue 41). nats.js does not
 * write a publish to the socket when it is called: it fills its outbound
 * buffer and writes the buffer in a later microtask (or at once, past its
 * pending limit). Hundreds of chains resuming on one batch of PubAcks each
 * passed their lease check and were written in one chunk; a freeze landing
 * inside that batch sent them all after the lane had moved (7–38 stale
 * copies in 4 of 9 rounds, stored again behind newer versions).
 *
 * So the relay wraps the protocol's flush of its connection: every message
 * notes its lane and epoch before it enters the buffer, and the flush, in
 * the same synchronous turn as the socket write, checks each noted lease by
 * the monotonic clock. One stale lease and nothing of the buffer is
 * written: the buffer is dropped, every PubAck awaited fails as not sent,
 * and the connection is reset (RST: the kernel's unsent bytes go too), so a
 * client buffer never outlives a lease. nats.js reconnects; the lanes still
 * held claim their rows again. What remains is a freeze landing inside the
 * write call itself (docs/failure-modes.md).
 *
 * A lane lost while messages of it await their PubAck resets the
 * connection as well (`lost()`): after a partition without a reset, those
 * bytes may still sit in the socket's buffers and reach the server when it
 * heals, long after another instance sent the key's later rows.
 */
export class WireFence {
  readonly #o: WireFenceOptions;
  /** Leases of the messages in the client's buffer since the last write. */
  readonly #buffered: LeaseMark[] = [];
  #protocol: Protocol | undefined;
  #onCut: ((err: FencedError) => void) | undefined;
  #cuts = 0;

  constructor(options: WireFenceOptions) {
    this.#o = options;
  }

  /**
   * Wraps `nc`'s flush. Throws when nats.js's protocol handler is not what
   * the fence was written for (an upgrade changed it): a relay must not run
   * without its last lease check. `onCut` fails what awaited a PubAck.
   */
  install(nc: NatsConnection, onCut: (err: FencedError) => void): void {
    const protocol = (nc as unknown as { protocol?: Protocol }).protocol;
    if (
      typeof protocol?.flushPending !== 'function' ||
      typeof protocol.outbound?.size !== 'function' ||
      typeof protocol.outbound.reset !== 'function'
    ) {
      throw new Error(
        'the NATS client has no protocol.flushPending/outbound (a nats.js release the relay was not written for): the wire fence cannot check leases where bytes leave; install the @nats-io/transport-node version in package-lock.json',
      );
    }
    const flush = protocol.flushPending.bind(protocol);
    protocol.flushPending = () => this.#flush(flush);
    this.#protocol = protocol;
    this.#onCut = onCut;
  }

  /** A message of `lease` is about to enter the client's buffer: noted before, as a flush may run inside the publish call. */
  note(lease: LeaseMark): void {
    this.#buffered.push(lease);
  }

  /** The fence reset the connection and nats.js has not replaced it yet: nothing may be published meanwhile. */
  get severed(): boolean {
    // The transport forgets its socket once it has seen it close, before the protocol hears of it: a publish
    // then would be dropped silently by the closed transport and wait out its PubAck timeout.
    const t = this.#protocol?.transport;
    return t?.socket?.destroyed === true || t?.isClosed === true;
  }

  /** Connections reset by the fence so far. */
  get cuts(): number {
    return this.#cuts;
  }

  /** Lanes were lost while `inFlight` messages of them await PubAcks: their bytes may still be in a socket buffer. */
  lost(lanes: readonly number[], inFlight: number): void {
    if (inFlight > 0) this.#cut(`lane ${lanes.join(', ')} lost with ${inFlight} message(s) awaiting PubAcks`);
  }

  #flush(flush: () => void): void {
    const p = this.#protocol as Protocol;
    if (this.#buffered.length > 0 && p.outbound.size() > 0) {
      for (const l of this.#buffered) {
        if (!this.#o.holds(l.lane, l.epoch)) {
          this.#cut(`lane ${l.lane} epoch ${l.epoch} lost before its messages left`);
          return;
        }
      }
    }
    flush();
    // Not written (not connected yet): the buffer stays, and so do its leases, for the next flush.
    if (p.outbound.size() === 0) this.#buffered.length = 0;
  }

  #cut(reason: string): void {
    const p = this.#protocol;
    if (!p) return;
    const dropped = p.outbound.size();
    p.outbound.reset();
    this.#buffered.length = 0;
    this.#cuts++;
    const socket = p.transport?.socket;
    if (socket && !socket.destroyed) {
      if (typeof socket.resetAndDestroy === 'function') socket.resetAndDestroy();
      else socket.destroy();
    }
    this.#o.logger.warn(
      { event: 'wire-fenced', droppedBytes: dropped, reason },
      `wire fence: ${reason}; ${dropped} unsent bytes dropped and the NATS connection reset (nothing stale leaves)`,
    );
    this.#onCut?.(new FencedError(`not sent: ${reason}`));
  }
}
