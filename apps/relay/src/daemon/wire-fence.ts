import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from '../types.js';

/** A lane under the epoch a message was sent for. */
export interface LeaseMark {
  lane: number;
  epoch: string;
  /** The event's id, named when its bytes may have left late (`onLate`). */
  id?: string;
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
  transport?: { isClosed?: boolean; socket?: Socket };
}

/** The part of the transport's `net.Socket` the fence reads. */
interface Socket {
  destroy(): void;
  resetAndDestroy?: () => void;
  destroyed?: boolean;
  /** Bytes handed to the socket that the kernel has not taken yet. */
  writableLength?: number;
  write(chunk: Uint8Array, cb: (err?: Error | null) => void): boolean;
}

const EMPTY = new Uint8Array(0);

export interface WireFenceOptions {
  /** Whether `lane` is held under `epoch` now, by this instance's monotonic clock (`LaneLeaser.holds`). */
  holds: (lane: number, epoch: string) => boolean;
  logger: Logger;
  /**
   * Messages whose bytes may have reached the kernel after their lease ended:
   * a pause (a freeze, a stopped VM) between the check and the write call, or
   * the unwritten tail of a write that the kernel took only in part and
   * that went out once the lease had passed. The fence cannot take those
   * back; it says so (the relay counts them and logs their ids).
   */
  onLate?: (marks: readonly LeaseMark[], reason: string) => void;
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
 * held claim their rows again.
 *
 * What a client cannot fence (a CI run's freeze found it): a process stopped
 * after the check and before the write call's system call (microseconds),
 * and the tail of a write the kernel took only in part, which Node writes
 * later from its own queue without a check. The fence keeps the second
 * from growing: while a tail waits, nothing more is written to the socket,
 * so new messages stay in the client's buffer under the check. And it
 * reports both: after every write it checks the leases again (a lease that
 * ended by then may have ended before the bytes left), and when a tail is
 * written; what may have left late goes to `onLate` with its ids. Only a
 * broker that checks an epoch could refuse them (docs/failure-modes.md).
 *
 * A lane lost while messages of it await their PubAck resets the
 * connection as well (`lost()`): after a partition without a reset, those
 * bytes may still sit in the socket's buffers and reach the server when it
 * heals, long after another instance sent the key's later rows.
 */
export class WireFence {
  readonly #o: WireFenceOptions;
  /** Messages in the client's buffer since the last write. */
  #buffered: LeaseMark[] = [];
  /** Their leases, one entry a lane: checked twice a write, so the check costs the lanes, not the messages. */
  readonly #leases = new Map<number, string>();
  /** A lane noted under two epochs in one buffer: the older was lost meanwhile. */
  #mixed = false;
  /** The socket whose earlier write the kernel took only in part: nothing more is written to it until that write ends. */
  #waiting: Socket | undefined;
  #protocol: Protocol | undefined;
  #onCut: ((err: FencedError) => void) | undefined;
  #cuts = 0;
  #late = 0;

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
    const epoch = this.#leases.get(lease.lane);
    if (epoch === undefined) this.#leases.set(lease.lane, lease.epoch);
    else if (epoch !== lease.epoch) this.#mixed = true;
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

  /** Messages reported to `onLate` so far. */
  get late(): number {
    return this.#late;
  }

  /** Lanes were lost while `inFlight` messages of them await PubAcks: their bytes may still be in a socket buffer. */
  lost(lanes: readonly number[], inFlight: number): void {
    if (inFlight > 0) this.#cut(`lane ${lanes.join(', ')} lost with ${inFlight} message(s) awaiting PubAcks`);
  }

  /** The lease of a lane in the buffer that is not held now, if any. */
  #stale(): string | undefined {
    if (this.#mixed) return 'a lane noted under two epochs';
    for (const [lane, epoch] of this.#leases) if (!this.#o.holds(lane, epoch)) return `lane ${lane} epoch ${epoch}`;
    return undefined;
  }

  #flush(flush: () => void): void {
    const p = this.#protocol as Protocol;
    if (this.#buffered.length === 0 || p.outbound.size() === 0) {
      flush();
      return;
    }
    const socket = p.transport?.socket;
    // The kernel took only part of an earlier write, and the rest waits in this process for the socket
    // to drain, to be written then without a check: what is buffered now stays in the client's buffer,
    // where this check sees it, until that write ends.
    if (socket !== undefined && socket === this.#waiting) return;
    if (socket !== undefined && (socket.writableLength ?? 0) > 0) {
      // Someone else's write (a ping) is still partly in this process: the same wait.
      this.#awaitTail(socket, p, []);
      return;
    }
    const stale = this.#stale();
    if (stale !== undefined) {
      this.#cut(`${stale} lost before its messages left`);
      return;
    }
    flush();
    // Not written (not connected yet): the buffer stays, and so do its leases, for the next flush.
    if (p.outbound.size() > 0) return;
    // The check and the write were one synchronous turn, but a process can be stopped between any two
    // instructions: a lease that ended by the time the write returned may have ended before it.
    const after = this.#stale();
    const written = this.#buffered;
    this.#buffered = [];
    this.#leases.clear();
    this.#mixed = false;
    if (after !== undefined) this.#reportLate(written, `${after} ended between the lease check and the socket write (a pause)`);
    else if (socket !== undefined && (socket.writableLength ?? 0) > 0) this.#awaitTail(socket, p, written);
  }

  /** Waits for the kernel to take the rest of a write, then checks the leases of what it carried. */
  #awaitTail(socket: Socket, p: Protocol, written: LeaseMark[]): void {
    this.#waiting = socket;
    const leases = new Map<number, string>();
    for (const m of written) leases.set(m.lane, m.epoch);
    // An empty write's callback runs once every earlier write to the socket has ended (or failed).
    socket.write(EMPTY, () => {
      if (this.#waiting === socket) this.#waiting = undefined;
      for (const [lane, epoch] of leases) {
        if (!this.#o.holds(lane, epoch)) {
          this.#reportLate(written, `lane ${lane} epoch ${epoch} ended while the kernel had not taken all of a write`);
          break;
        }
      }
      if (!socket.destroyed && p.transport?.socket === socket && p.outbound.size() > 0) p.flushPending();
    });
  }

  #reportLate(marks: readonly LeaseMark[], reason: string): void {
    this.#late += marks.length;
    this.#o.logger.warn(
      { event: 'wire-late', messages: marks.length, ids: marks.map((m) => m.id).filter((id) => id !== undefined), reason },
      `wire fence: ${marks.length} message(s) may have left after their lease ended (${reason}); the stream may hold them after the lane's new holder sent them, outside the duplicate window (docs/failure-modes.md)`,
    );
    this.#o.onLate?.(marks, reason);
  }

  #cut(reason: string): void {
    const p = this.#protocol;
    if (!p) return;
    const dropped = p.outbound.size();
    p.outbound.reset();
    this.#buffered = [];
    this.#leases.clear();
    this.#mixed = false;
    this.#waiting = undefined;
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
