import { ERROR_CODES, type ErrorCode, FerryError, messageErrorClass } from '@ferry/core';
import { JetStreamApiError } from '@nats-io/jetstream';
import { errors as natsErrors } from '@nats-io/transport-node';
import type { FailureReason } from './types.js';

/** JetStream API error code: the message is larger than the stream's `max_msg_size`. */
const JS_MESSAGE_SIZE_EXCEEDS_MAXIMUM = 10054;

export interface Classified {
  readonly reason: FailureReason;
  /** Permanent: no retry can succeed; the row is dead at once with the reason. */
  readonly permanent: boolean;
  /** A failure of NATS itself (counts toward the circuit breaker), not of one message. */
  readonly transport: boolean;
  readonly message: string;
  /**
   * Set by the chain sender, never by the classifier: JetStream's own API did not answer either, so
   * the failure is the outage's, not the row's. The row still counts the attempt and backs off, but
   * it never goes dead for it: an outage outlasting `maxAttempts` probes must not kill the heads it
   * probed. (Not "no attempt at all": a relay whose account reaches its streams through imports sees
   * JetStream's API down for good, and its unbound subjects' rows would retry at once, forever.)
   */
  readonly outage?: boolean;
}

function text(err: unknown): string {
  if (err instanceof Error) {
    const cause = err.cause instanceof Error ? `: ${err.cause.message}` : '';
    return `${err.name}: ${err.message}${cause}`.slice(0, 1000);
  }
  return String(err).slice(0, 1000);
}

/**
 * Sorts a publish failure into retryable and permanent.
 *
 * Retryable (backoff, then again): a PubAck timeout, no responders (no
 * JetStream or no stream bound to the subject yet: a stream being created or
 * failing over looks the same, so this is treated as transient and left to
 * `--max-attempts`), a closed or lost connection, any other JetStream API
 * error. Permanent (dead at once): a message over the server's `max_payload`
 * or the stream's `max_msg_size`, a permission or authorization violation.
 *
 * `transport` (counts toward the NATS circuit breaker) only for failures of
 * NATS itself: a timeout or a lost connection. No responders belongs to one
 * subject (the one no stream binds): one unroutable row must not pause every
 * healthy key, so it backs off on its own and blocks only its key. (The
 * chain sender takes no responders for JetStream itself being down when
 * JetStream's own API does not answer either: then the breaker counts it and
 * the row backs off but never dies of it, `Classified.outage`.)
 */
export function classifyPublishError(err: unknown): Classified {
  const message = text(err);
  if (err instanceof natsErrors.InvalidArgumentError && /max_payload/.test(err.message)) {
    return { reason: 'max_payload', permanent: true, transport: false, message };
  }
  if (err instanceof natsErrors.PermissionViolationError || err instanceof natsErrors.AuthorizationError) {
    return { reason: 'permission', permanent: true, transport: false, message };
  }
  if (err instanceof JetStreamApiError) {
    if (err.code === JS_MESSAGE_SIZE_EXCEEDS_MAXIMUM) return { reason: 'max_payload', permanent: true, transport: false, message };
    return { reason: 'rejected', permanent: false, transport: false, message };
  }
  if (err instanceof natsErrors.TimeoutError) return { reason: 'timeout', permanent: false, transport: true, message };
  // The relay's PubAcks raise NoRespondersError; nats.js's js.publish() a JetStreamNotEnabled error (not exported
  // from the package's public entry) or a RequestError caused by it.
  if (
    err instanceof natsErrors.NoRespondersError ||
    (err instanceof Error && err.name === 'JetStreamNotEnabled') ||
    (err instanceof natsErrors.RequestError && err.isNoResponders())
  ) {
    return { reason: 'no_responders', permanent: false, transport: false, message };
  }
  if (
    err instanceof natsErrors.ClosedConnectionError ||
    err instanceof natsErrors.DrainingConnectionError ||
    err instanceof natsErrors.ConnectionError
  ) {
    return { reason: 'connection', permanent: false, transport: true, message };
  }
  if (err instanceof natsErrors.RequestError) {
    const cause = err.cause;
    if (cause instanceof natsErrors.TimeoutError) return { reason: 'timeout', permanent: false, transport: true, message };
    if (cause instanceof natsErrors.PermissionViolationError) return { reason: 'permission', permanent: true, transport: false, message };
    return { reason: 'connection', permanent: false, transport: true, message };
  }
  return { reason: 'other', permanent: false, transport: false, message };
}

/**
 * Codes of the relay's and the CLI's own errors that core's `ERROR_CODES` has
 * no name for (NATS trouble is core's `FERRY_UNAVAILABLE`, a schema to
 * migrate first core's `FERRY_MIGRATION`). The CLI's exit code follows the
 * class, not the code: the errors here all exit 1 (a runtime failure); a
 * `ConfigError` or `ValidationError` exits 2, a `MigrationError` 3.
 */
export const RELAY_ERROR_CODES = {
  /** A command ran and did not do all it was asked (the message says what is left). */
  failed: 'FERRY_FAILED',
  /** A destructive command was not confirmed on the terminal: nothing was done. */
  notConfirmed: 'FERRY_NOT_CONFIRMED',
  /** `stop()` was called while `start()` still waited for NATS. */
  abandoned: 'FERRY_ABANDONED',
} as const;
export type RelayErrorCode = (typeof RELAY_ERROR_CODES)[keyof typeof RELAY_ERROR_CODES];

/** The base of the relay's own errors: a `FerryError` with one of core's codes or of `RELAY_ERROR_CODES`. */
export class RelayError extends FerryError {
  constructor(code: ErrorCode | RelayErrorCode, message: string, options?: { cause?: unknown }) {
    // core's ErrorCode union does not list the relay's own codes; the value is one of the two sets.
    super(code as ErrorCode, message, options);
    this.name = 'RelayError';
  }
}

/** Thrown inside the circuit breaker when a whole batch failed for NATS reasons. */
export class NatsUnavailableError extends messageErrorClass(RelayError, 'NatsUnavailableError', ERROR_CODES.unavailable) {}

/** NATS refused a connection: not reachable (an operator command), or its TLS certificate failed verification. */
export class NatsConnectError extends messageErrorClass(RelayError, 'NatsConnectError', ERROR_CODES.unavailable) {}

/** The schema has no Ferry outbox tables, or no lane setting: run `ferry migrate` first. */
export class NotMigratedError extends messageErrorClass(RelayError, 'NotMigratedError', ERROR_CODES.migration) {}

/** A command did not do all it was asked: ids that were not dead, a replay left incomplete, a canary lost. */
export class CommandFailedError extends messageErrorClass(RelayError, 'CommandFailedError', RELAY_ERROR_CODES.failed) {}

/** The operator answered no: nothing was done. */
export class NotConfirmedError extends RelayError {
  constructor() {
    super(RELAY_ERROR_CODES.notConfirmed, 'nothing done: not confirmed');
    this.name = 'NotConfirmedError';
  }
}

/** `stop()` was called while `start()` still waited for NATS. */
export class StartAbandonedError extends RelayError {
  constructor() {
    super(RELAY_ERROR_CODES.abandoned, 'relay stopped before it finished starting');
    this.name = 'StartAbandonedError';
  }
}
