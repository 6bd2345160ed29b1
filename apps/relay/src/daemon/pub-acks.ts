import { JetStreamApiError, type PubAck } from '@nats-io/jetstream';
import {
  ClosedConnectionError,
  createInbox,
  errors,
  type Msg,
  type MsgHdrs,
  type NatsConnection,
  NoRespondersError,
  PermissionViolationError,
  type Subscription,
  TimeoutError,
} from '@nats-io/transport-node';
import { FencedError, type LeaseMark, type WireFence } from './wire-fence.js';

interface Pending {
  subject: string;
  /** The lane, when the message was sent for one (the wire fence's lost lanes). */
  lane: number | undefined;
  deadline: number;
  resolve: (ack: PubAck) => void;
  reject: (err: Error) => void;
}

/**
 * JetStream publishing with the PubAcks on one reply subscription of the
 * relay's own. `js.publish()` makes each message a core request: a request
 * object, a promise, a timer, and on success an Error built only to be
 * dropped (nats.js cancels the finished request with a `RequestError`). On
 * a drain of 60,000 events that was a quarter of the relay's CPU with the
 * garbage it left (docs/benchmarks.md). Here a message is a `PUB` with a reply
 * subject of this subscription and a map entry; one timer waits for the
 * oldest deadline (every entry has the same timeout, so the map's insertion
 * order is deadline order).
 *
 * The errors are nats.js's own, as `js.publish()` raises them, so the relay
 * classifies them the same way: `TimeoutError`, `NoRespondersError` (no
 * stream binds the subject), `JetStreamApiError` (the stream refused the
 * message), `PermissionViolationError` (the server refused the publish or
 * this subscription), `ClosedConnectionError`, and what `nc.publish()`
 * throws at once (over max_payload, a closed or draining connection).
 */
export class PubAcks {
  readonly #nc: NatsConnection;
  readonly #timeoutMs: number;
  readonly #prefix: string;
  readonly #pending = new Map<string, Pending>();
  readonly #sub: Subscription;
  #next = 0;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;
  /** The last JetStream probe (see jetStreamAnswers) and when it was asked. */
  #probe: Promise<boolean> | undefined;
  #probeAt = 0;

  readonly #fence: WireFence | undefined;

  /** With a `fence`, every publish names its lease, and nothing is written for a lease that went stale meanwhile. */
  constructor(nc: NatsConnection, timeoutMs: number, fence?: WireFence) {
    this.#nc = nc;
    this.#timeoutMs = timeoutMs;
    this.#fence = fence;
    fence?.install(nc, (err) => this.#failAll(err));
    // The connection's own inbox prefix, as nats.js's requests use it: a server that lets this user
    // subscribe only under that prefix accepts the PubAck subscription too, whoever made the connection.
    const inboxPrefix = (nc as { options?: { inboxPrefix?: string } }).options?.inboxPrefix;
    this.#prefix = `${createInbox(inboxPrefix)}.`;
    this.#sub = nc.subscribe(`${this.#prefix}*`, { callback: (err, msg) => this.#answer(err, msg) });
    this.#sub.closed.then(
      () => this.#failAll(new ClosedConnectionError()),
      (err: Error) => this.#failAll(err),
    );
    this.#watchPermissions();
  }

  /**
   * Publishes one message and resolves with its PubAck (`duplicate: true` when the stream already held its id).
   * `lease`: the lane and epoch it is sent under; the wire fence drops it (FencedError) if that lease is
   * stale when the bytes would leave.
   */
  publish(subject: string, data: Uint8Array, headers: MsgHdrs, lease?: LeaseMark): Promise<PubAck> {
    return new Promise<PubAck>((resolve, reject) => {
      if (this.#closed) {
        reject(new ClosedConnectionError());
        return;
      }
      // Not while the client reconnects: nats.js would hold the message and write it once a new
      // connection is up, maybe long after this relay lost the lane and another sent the key's later
      // rows (a stale copy, stored after them outside the duplicate window). Refused here, it was not sent.
      if ((this.#nc as { protocol?: { connected?: boolean } }).protocol?.connected === false) {
        reject(new errors.ConnectionError('not connected to NATS (reconnecting): not sent'));
        return;
      }
      if (this.#fence?.severed) {
        reject(new FencedError('not sent: the wire fence reset the NATS connection, and nats.js has not reconnected yet'));
        return;
      }
      const token = (this.#next++).toString(36);
      // Awaited before the publish call: past its pending limit nats.js writes inside it, and a fence
      // that drops that write fails what is awaited.
      this.#pending.set(token, { subject, lane: lease?.lane, deadline: performance.now() + this.#timeoutMs, resolve, reject });
      if (lease) this.#fence?.note(lease);
      try {
        this.#nc.publish(subject, data, { headers, reply: this.#prefix + token });
      } catch (err) {
        this.#pending.delete(token);
        reject(err);
        return;
      }
      this.#timer ??= setTimeout(() => this.#expire(), this.#timeoutMs);
    });
  }

  /**
   * Whether JetStream itself answers on this connection: a `$JS.API.INFO`
   * request, asked at most once a second (callers share the answer). No
   * responders, no answer within the publish timeout, or an answer with error
   * code 503 (JetStream not enabled for the account, or unavailable) is false:
   * a subject's no responders is then JetStream's, not the subject's.
   * Any other answer, or an error that says nothing about JetStream (no
   * permission for the API, a closed connection), is true.
   */
  jetStreamAnswers(): Promise<boolean> {
    const now = performance.now();
    if (this.#probe && now - this.#probeAt < 1_000) return this.#probe;
    this.#probeAt = now;
    this.#probe = this.#nc.request('$JS.API.INFO', undefined, { timeout: this.#timeoutMs }).then(
      (msg) => {
        if (msg.data.length === 0) return msg.headers?.code !== 503; // a bare 503 is no responders
        // The server answers for an account without JetStream (or while JetStream is unavailable) with a 503 error.
        try {
          return (msg.json() as { error?: { code?: unknown } }).error?.code !== 503;
        } catch {
          return true;
        }
      },
      (err: unknown) => !(err instanceof NoRespondersError || err instanceof TimeoutError || isNoResponders(err)),
    );
    return this.#probe;
  }

  /** PubAcks still awaited. */
  get pending(): number {
    return this.#pending.size;
  }

  /**
   * Lanes were lost (by the clock, taken, released, the lease connection
   * ended): if a message of one still awaits its PubAck, its bytes may sit in
   * a socket buffer, and the fence resets the connection.
   */
  lost(lanes: readonly number[]): void {
    if (!this.#fence || this.#pending.size === 0) return;
    const gone = new Set(lanes);
    let inFlight = 0;
    for (const p of this.#pending.values()) if (p.lane !== undefined && gone.has(p.lane)) inFlight++;
    this.#fence.lost(lanes, inFlight);
  }

  /** Stops listening; whatever is still awaited, and any later publish, fails with ClosedConnectionError. */
  close(): void {
    this.#closed = true;
    this.#sub.unsubscribe();
    this.#failAll(new ClosedConnectionError());
  }

  #answer(err: Error | null, msg: Msg): void {
    if (err) {
      // The subscription itself failed (say, no permission to subscribe to the inbox): nothing will be answered.
      this.#failAll(err);
      return;
    }
    const token = msg.subject.slice(this.#prefix.length);
    const p = this.#pending.get(token);
    if (!p) return; // answered after its timeout
    this.#pending.delete(token);
    if (msg.data.length === 0 && msg.headers?.code === 503) {
      p.reject(new NoRespondersError(p.subject));
      return;
    }
    let answer: unknown;
    try {
      answer = msg.json();
    } catch {
      answer = undefined;
    }
    const ack = typeof answer === 'object' && answer !== null ? (answer as Partial<PubAck> & { error?: unknown }) : undefined;
    const error = ack?.error;
    if (typeof error === 'object' && error !== null) {
      const e = error as { code?: unknown; err_code?: unknown; description?: unknown };
      p.reject(
        new JetStreamApiError({
          code: typeof e.code === 'number' ? e.code : 0,
          err_code: typeof e.err_code === 'number' ? e.err_code : 0,
          description: typeof e.description === 'string' ? e.description : 'JetStream refused the message',
        }),
      );
    } else if (ack && error === undefined && typeof ack.stream === 'string' && ack.stream !== '' && typeof ack.seq === 'number') {
      p.resolve({ stream: ack.stream, seq: ack.seq, duplicate: ack.duplicate === true, ...(ack.domain ? { domain: ack.domain } : {}) });
    } else {
      p.reject(new Error(`invalid PubAck for ${p.subject}: ${JSON.stringify(msg.string().slice(0, 200))}`));
    }
  }

  /** Fails the entries past their deadline (the oldest first) and waits for the next one. */
  #expire(): void {
    this.#timer = undefined;
    const now = performance.now();
    for (const [token, p] of this.#pending) {
      if (p.deadline > now) {
        this.#timer = setTimeout(() => this.#expire(), Math.ceil(p.deadline - now));
        return;
      }
      this.#pending.delete(token);
      p.reject(new TimeoutError());
    }
  }

  #failAll(err: Error): void {
    for (const p of this.#pending.values()) p.reject(err);
    this.#pending.clear();
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /** A publish the server refused for permissions fails the messages awaited on that subject. */
  #watchPermissions(): void {
    (async () => {
      for await (const s of this.#nc.status()) {
        if (this.#closed) break; // ends this status listener at the connection's next event
        if (s.type !== 'error' || !(s.error instanceof PermissionViolationError) || s.error.operation !== 'publish') continue;
        for (const [token, p] of this.#pending) {
          if (p.subject !== s.error.subject) continue;
          this.#pending.delete(token);
          p.reject(s.error);
        }
      }
    })().catch(() => {});
  }
}

/** nats.js reports a request nobody answered as a RequestError whose cause is the NoRespondersError. */
function isNoResponders(err: unknown): boolean {
  const e = err as { isNoResponders?: () => boolean; cause?: unknown } | null;
  return typeof e?.isNoResponders === 'function' ? e.isNoResponders() : e?.cause instanceof NoRespondersError;
}
