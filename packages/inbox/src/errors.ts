import type { ContractParkReason } from '@ferry/contracts';
import { ConfigError, ERROR_CODES, FerryError } from '@ferry/core';

export {
  ConfigError,
  FerryError,
  isConfigError,
  isMigrationError,
  isValidationError,
  MigrationError,
  ValidationError,
} from '@ferry/core';

/** The durable consumer is missing or differs from what the inbox needs (`manageConsumer: false`). */
export class ConsumerMismatchError extends ConfigError {
  readonly stream: string;
  readonly consumer: string;
  /** One line per difference, e.g. `ack_policy is "none", need "explicit"`. */
  readonly differences: readonly string[];
  constructor(stream: string, consumer: string, differences: readonly string[], options?: { cause?: unknown }) {
    super(
      'manageConsumer',
      `JetStream consumer "${consumer}" on stream "${stream}" ${differences.join('; ')}; ` +
        'create or fix it (or let the inbox manage it with manageConsumer: true)',
      options,
    );
    this.name = 'ConsumerMismatchError';
    this.stream = stream;
    this.consumer = consumer;
    this.differences = differences;
  }
}

export const isConsumerMismatchError = (e: unknown): e is ConsumerMismatchError => e instanceof ConsumerMismatchError;

/** Why a message could not become an event; carried into the park queue. Code `FERRY_POISON`. */
export class PoisonMessageError extends FerryError {
  readonly reason: 'undecodable-headers' | 'undecodable-body' | 'unknown-type' | ContractParkReason;
  constructor(reason: PoisonMessageError['reason'], message: string, options?: { cause?: unknown }) {
    super(ERROR_CODES.poison, message, options);
    this.name = 'PoisonMessageError';
    this.reason = reason;
  }
}

/**
 * The version gate found the key's row changed by another writer between its
 * two statements (`latest` and `dedupe` modes): the message is naked and
 * retried like a failed handler. Code `FERRY_RETRY`.
 */
export class GateRaceError extends FerryError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(ERROR_CODES.retry, message, options);
    this.name = 'GateRaceError';
  }
}

/**
 * The park worker retried a parked `sequential` event whose predecessor is
 * neither applied nor parked yet: pg-boss retries the job later. Code `FERRY_RETRY`.
 */
export class ParkedGapError extends FerryError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(ERROR_CODES.retry, message, options);
    this.name = 'ParkedGapError';
  }
}

export const isPoisonMessageError = (e: unknown): e is PoisonMessageError => e instanceof PoisonMessageError;
