import type { ContractParkReason } from '@ferry/contracts';
import { ConfigError, ERROR_CODES, FerryError, messageErrorClass } from '@ferry/core';

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
  declare readonly stream: string;
  declare readonly consumer: string;
  /** One line per difference, e.g. `ack_policy is "none", need "explicit"`. */
  declare readonly differences: readonly string[];
  constructor(stream: string, consumer: string, differences: readonly string[], options?: { cause?: unknown }) {
    super(
      'manageConsumer',
      `JetStream consumer "${consumer}" on stream "${stream}" ${differences.join('; ')}; ` +
        'create or fix it (or let the inbox manage it with manageConsumer: true)',
      options,
    );
    Object.assign(this, { name: 'ConsumerMismatchError', stream, consumer, differences });
  }
}

export const isConsumerMismatchError = (e: unknown): e is ConsumerMismatchError => e instanceof ConsumerMismatchError;

/** Why a message could not become an event; carried into the park queue. Code `FERRY_POISON`. */
export class PoisonMessageError extends FerryError {
  declare readonly reason: 'undecodable-headers' | 'undecodable-body' | 'unknown-type' | ContractParkReason;
  constructor(reason: PoisonMessageError['reason'], message: string, options?: { cause?: unknown }) {
    super(ERROR_CODES.poison, message, options);
    Object.assign(this, { name: 'PoisonMessageError', reason });
  }
}

/**
 * The version gate found the key's row changed by another writer between its
 * two statements (`latest` and `dedupe` modes): the message is naked and
 * retried like a failed handler. Code `FERRY_RETRY`.
 */
export class GateRaceError extends messageErrorClass(FerryError, 'GateRaceError', ERROR_CODES.retry) {}

/**
 * The park worker retried a parked `sequential` event whose predecessor is
 * neither applied nor parked yet: pg-boss retries the job later. Code `FERRY_RETRY`.
 */
export class ParkedGapError extends messageErrorClass(FerryError, 'ParkedGapError', ERROR_CODES.retry) {}

export const isPoisonMessageError = (e: unknown): e is PoisonMessageError => e instanceof PoisonMessageError;
