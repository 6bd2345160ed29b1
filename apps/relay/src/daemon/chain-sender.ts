import {
  encodedSize,
  encodedSizeAtMost,
  encodeEvent,
  eventFromOutboxRow,
  LIMITS,
  RESERVED_SUBJECT_RULE,
  reservedSubjectMessage,
  reservedSubjectToken,
} from '@ferry/core';
import { BrokenCircuitError, type CircuitBreakerPolicy, IsolatedCircuitError } from 'cockatiel';
import { classifyPublishError, NatsUnavailableError } from '../errors.js';
import type { ClaimedRow } from '../sql/claim-batch.js';
import type { LeasedRow, Outcome } from './claim-plan.js';
import type { PubAcks } from './pub-acks.js';
import type { RelayTestHooks } from './relay-emitter.js';
import { SendSpan } from './send-span.js';
import { FencedError } from './wire-fence.js';
import { natsHeaders } from './wire-headers.js';

export interface ChainSenderDeps {
  breaker: CircuitBreakerPolicy;
  acks: PubAcks;
  /** The server's max_payload, when known. */
  maxPayload: () => number | undefined;
  /** Whether the row's lane is still held under its epoch, by this instance's own clock. */
  holds: (row: LeasedRow) => boolean;
  hooks?: RelayTestHooks;
}

/**
 * Sends a chain's segments to JetStream, one row after the previous one's
 * PubAck, through the NATS circuit breaker, and checks the lease before
 * every row.
 */
export class ChainSender {
  readonly #d: ChainSenderDeps;
  constructor(deps: ChainSenderDeps) {
    this.#d = deps;
  }

  /** Sends one segment of a chain through the circuit breaker; a row missing from the result was not sent. */
  async send(segment: LeasedRow[]): Promise<Map<ClaimedRow, Outcome>> {
    try {
      return await this.#d.breaker.execute(() => this.#publishChain(segment));
    } catch (err) {
      if (err instanceof BrokenCircuitError || err instanceof IsolatedCircuitError) return new Map(); // claimed again later
      if (err instanceof NatsUnavailableError) return err.cause as Map<ClaimedRow, Outcome>;
      throw err;
    }
  }

  /**
   * Sends a chain's rows one after another: a row goes out only once the
   * previous row of its key is acknowledged, and a failure ends the chain
   * (the rest are not sent). So whatever happens to a row (refused here,
   * rejected by the server, PubAck timeout, a reconnect that loses or
   * re-sends what was on the wire), no later row of its key can reach the
   * stream before it.
   */
  async #publishChain(rows: readonly LeasedRow[]): Promise<Map<ClaimedRow, Outcome>> {
    const outcomes = new Map<ClaimedRow, Outcome>();
    for (const row of rows) {
      // Fencing by the clock, before every send: JetStream cannot check an epoch, so a lane lost
      // (a freeze, a partition) must stop the chain here. A row left out was not sent: the chain
      // ends without a failure, and the lane's new holder claims it.
      if (!this.#d.holds(row)) break;
      const outcome = await this.#publishOne(row);
      if (outcome === undefined) break; // not sent: the lease ran out here or at the wire fence
      outcomes.set(row, outcome);
      if (!outcome.ok) break;
    }
    // The breaker counts a segment only when NATS itself failed the rows it was given: a timeout or a
    // lost connection, or no responders while JetStream itself does not answer either (a probe of its
    // API, asked at most once a second). No responders from a JetStream that answers belongs to the
    // subject (no stream binds it): its rows back off per key and never pause the healthy keys, on
    // however many subjects (issue 28; docs/relay.md).
    let answered = false;
    let first: Outcome | undefined;
    let noResponders: Outcome | undefined;
    for (const x of outcomes.values()) {
      if (x.ok || (!x.transport && x.reason !== 'no_responders')) answered = true;
      else if (x.reason === 'no_responders') noResponders ??= x;
      else first ??= x;
    }
    if (!answered && !first && noResponders && !(await this.#d.acks.jetStreamAnswers())) {
      // JetStream is down: a row must not die of the outage, or one that outlasts --max-attempts probes
      // kills the head of every key it probes (an outage turned into dead letters).
      for (const [row, x] of outcomes) if (x === noResponders && !x.ok) outcomes.set(row, { ...x, outage: true });
      first = noResponders;
    }
    if (!answered && first && !first.ok) {
      throw new NatsUnavailableError(`publishing failed: ${first.message}`, { cause: outcomes });
    }
    return outcomes;
  }

  /** The row's outcome, or undefined when it was not sent because its lane's lease ran out meanwhile. */
  async #publishOne(row: LeasedRow): Promise<Outcome | undefined> {
    const maxPayload = this.#d.maxPayload();
    const span = SendSpan.start(row); // tracing: undefined unless an OpenTelemetry SDK records
    try {
      // Never sent, whoever stored it (before outbox migration 000016, or the owner by hand): the relay
      // publishes with a reply subject, so to $JS.API.… it is a JetStream command (issue 42: a stream deleted).
      if (reservedSubjectToken(row.subject) !== undefined) {
        const refused: Outcome = {
          ok: false,
          reason: RESERVED_SUBJECT_RULE,
          permanent: true,
          transport: false,
          message: `${reservedSubjectMessage(row.subject)}; the relay did not send it (ferry dlq discard removes it)`,
        };
        span?.failed(refused);
        return refused;
      }
      if (row.data === null) {
        // Measured in SQL and not loaded (claim-batch.ts): over max_payload, it can never be sent.
        const refused: Outcome = {
          ok: false,
          reason: 'max_payload',
          permanent: true,
          transport: false,
          message: `the event's data is ${row.data_bytes} bytes, over the NATS server's max_payload of ${Math.min(this.#d.maxPayload() ?? LIMITS.maxEventBytes, LIMITS.maxEventBytes)}; the relay did not load it`,
        };
        span?.failed(refused);
        return refused;
      }
      const read = eventFromOutboxRow(row as ClaimedRow & { data: Buffer });
      const event = span ? { ...read, headers: span.headers(read.headers) } : read;
      const encoded = encodeEvent(event);
      // The exact size only when the bound (a few additions) is over the limit: with ~200-byte
      // events it never is, and measuring each of the ten headers' UTF-8 was work on every row.
      const size = maxPayload !== undefined && encodedSizeAtMost(event) > maxPayload ? encodedSize(encoded) : 0;
      if (maxPayload !== undefined && size > maxPayload) {
        const refused: Outcome = {
          ok: false,
          reason: 'max_payload',
          permanent: true,
          transport: false,
          message: `the event encodes to ${size} bytes, over the NATS server's max_payload of ${maxPayload}`,
        };
        span?.failed(refused);
        return refused;
      }
      const h = natsHeaders(encoded.headers);
      // Checked again after the encoding, so a lease lost meanwhile costs no buffer write; the check
      // that fences is the wire fence's, in the same turn as the socket write (wire-fence.ts): nats.js
      // writes its buffer a microtask later, after every chain resumed on a batch of PubAcks has run.
      if (!this.#d.holds(row)) {
        span?.notSent();
        return undefined;
      }
      // A PubAck with duplicate: true means JetStream already holds this id: success as well.
      const sent = this.#d.acks.publish(encoded.subject, encoded.body, h, row);
      this.#d.hooks?.afterSend?.(row);
      const ack = await sent;
      span?.acked(ack);
      return { ok: true, ackAt: Date.now() };
    } catch (err) {
      if (err instanceof FencedError) {
        // The wire fence dropped it (or reset the connection under it): not sent as far as the lease goes.
        span?.notSent();
        return undefined;
      }
      const failure = classifyPublishError(err);
      span?.failed(failure, err);
      return { ok: false, ...failure };
    }
  }
}
