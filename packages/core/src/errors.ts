/**
 * Ferry's typed errors. Every error has a stable `code`, a `name`, and a
 * message that says what was wrong, with which value, and what to do.
 */

export const ERROR_CODES = {
  invalid: 'FERRY_INVALID',
  conflict: 'FERRY_CONFLICT',
  migration: 'FERRY_MIGRATION',
  config: 'FERRY_CONFIG',
  /** A message or stored event that can never be processed as it is (it is parked). */
  poison: 'FERRY_POISON',
  /** A service Ferry needs (NATS, PostgreSQL) cannot be reached now; retried. */
  unavailable: 'FERRY_UNAVAILABLE',
  /** A transient state (a race, a version not there yet): the same operation is retried later. */
  retry: 'FERRY_RETRY',
  /** A state Ferry's own invariants rule out: a bug in Ferry, to be reported. */
  internal: 'FERRY_INTERNAL',
} as const;
export type ErrorCode = (typeof ERROR_CODES)[keyof typeof ERROR_CODES];

/** SQLSTATE codes Ferry reacts to (PostgreSQL appendix A). */
export const SQLSTATE = {
  uniqueViolation: '23505',
  /** Raised by the publish functions (with COLUMN = the field) for an event they refuse. */
  invalidParameterValue: '22023',
  serializationFailure: '40001',
  deadlockDetected: '40P01',
  undefinedTable: '42P01',
  undefinedFunction: '42883',
  invalidSchemaName: '3F000',
  insufficientPrivilege: '42501',
  adminShutdown: '57P01',
  crashShutdown: '57P02',
  cannotConnectNow: '57P03',
  /** Raised by relay_leases' trigger (outbox migration 000013): the instance's relay protocol is below the schema's floor. */
  relayBelowFloor: 'FR001',
} as const;

/**
 * The base of every error Ferry throws on purpose: `name` says which,
 * `code` is a stable `FERRY_*` string to branch on (see `ERROR_CODES`), and
 * `cause` carries the underlying error (a `pg` or NATS error) when there is
 * one. Each part narrows it: `ValidationError` (bad input, before any SQL),
 * `ConflictError`, `MigrationError`, `ConfigError`, …
 *
 * @example
 * try {
 *   await publisher.publish(tx, event);
 * } catch (err) {
 *   if (isValidationError(err)) return reply(400, err.message); // names the field and the fix
 *   throw err;
 * }
 */
export class FerryError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'FerryError';
    this.code = code;
  }
}

/** A constructor `(message, options?)`, as `messageErrorClass` returns. */
export type MessageErrorClass<E extends FerryError> = new (message: string, options?: { cause?: unknown }) => E;

/**
 * The class of an error that carries only a message (and a cause) under a fixed `name` and `code`:
 * the shape most of Ferry's errors share, written once. `base` is `FerryError` or a subclass whose
 * constructor takes `(code, message, options)` (the relay's `RelayError`).
 *
 * @example
 * export class GateRaceError extends messageErrorClass(FerryError, 'GateRaceError', ERROR_CODES.retry) {}
 */
export function messageErrorClass<C extends string, E extends FerryError>(
  base: new (code: C, message: string, options?: { cause?: unknown }) => E,
  name: string,
  code: C,
): MessageErrorClass<E> {
  // A class cannot extend a constructor of a type parameter's instances; the instance is an E all the same.
  const Base = base as unknown as new (code: C, message: string, options?: { cause?: unknown }) => FerryError;
  return class extends Base {
    constructor(message: string, options?: { cause?: unknown }) {
      super(code, message, options);
      this.name = name;
    }
  } as unknown as MessageErrorClass<E>;
}

/** Bad input: a field or option is invalid. Raised before any SQL runs. */
export class ValidationError extends FerryError {
  /** The offending field or option, e.g. `subject` or `events[3].key`. */
  declare readonly field: string;
  constructor(field: string, message: string, options?: { cause?: unknown }) {
    super(ERROR_CODES.invalid, message, options);
    Object.assign(this, { name: 'ValidationError', field });
  }
}

/**
 * A subject NATS reserves for itself (a first token that starts with `$`, or is `_INBOX`, `_R_`
 * or `_GR_`): publishing an event there would send a command to the server (`$JS.API.STREAM.DELETE.…`)
 * instead of an event to a stream. Raised by the publisher before any SQL, and for the database's
 * own refusal (outbox migration 000016); `field` names the event's subject (`events[3].subject`).
 */
export class ReservedSubjectError extends ValidationError {
  /** The refused subject (undefined when only the database saw it). */
  declare readonly subject: string | undefined;
  constructor(field: string, subject: string | undefined, message: string, options?: { cause?: unknown }) {
    super(field, message, options);
    Object.assign(this, { name: 'ReservedSubjectError', subject });
  }
}

/** The same event id (or key + version) already exists with other content. */
export class ConflictError extends FerryError {
  declare readonly eventId: string | undefined;
  constructor(message: string, options?: { cause?: unknown; eventId?: string }) {
    super(ERROR_CODES.conflict, message, options);
    Object.assign(this, { name: 'ConflictError', eventId: options?.eventId });
  }
}

/**
 * An explicit version that is not above the version already recorded for its
 * key (a lower one, a repeated one, or one whose event was pruned). Nothing
 * was written and the caller's transaction is still usable.
 */
export class VersionOrderError extends ConflictError {
  declare readonly key: string;
  declare readonly version: bigint;
  /** The key's highest version handed out so far. */
  declare readonly recorded: bigint;
  constructor(message: string, options: { eventId: string; key: string; version: bigint; recorded: bigint }) {
    super(message, { eventId: options.eventId });
    const { key, version, recorded } = options;
    Object.assign(this, { name: 'VersionOrderError', key, version, recorded });
  }
}

/** The database's Ferry schema cannot be migrated or is newer than this Ferry. */
export class MigrationError extends messageErrorClass(FerryError, 'MigrationError', ERROR_CODES.migration) {}

/** A misconfiguration that no retry can fix. */
export class ConfigError extends FerryError {
  declare readonly option: string;
  constructor(option: string, message: string, options?: { cause?: unknown }) {
    super(ERROR_CODES.config, message, options);
    Object.assign(this, { name: 'ConfigError', option });
  }
}

/** A state Ferry's own invariants rule out (a row gone under its lock): a bug in Ferry, please report it. */
export class InternalError extends messageErrorClass(FerryError, 'InternalError', ERROR_CODES.internal) {}

/**
 * A transaction run by `withTransaction(pool, fn, { timeoutMs })` did not end
 * within `timeoutMs` by the client's clock: PostgreSQL is unreachable (a
 * partition, a half-open connection), or the body is slower than the bound.
 * Its connection was released with this error (a `pg.Pool` destroys it, never
 * reuses it) and the transaction is left to the server to end. A timeout
 * during COMMIT is ambiguous: the transaction may have committed. Code
 * `FERRY_UNAVAILABLE`.
 */
export class TransactionTimeoutError extends FerryError {
  declare readonly timeoutMs: number;
  constructor(timeoutMs: number, option: string, options?: { cause?: unknown }) {
    super(
      ERROR_CODES.unavailable,
      `the transaction did not end within ${option} (${timeoutMs} ms), so its connection was given up (a pg.Pool destroys it, never reuses it): ` +
        `PostgreSQL may be unreachable from this process, or the work needs longer (raise ${option})`,
      options,
    );
    Object.assign(this, { name: 'TransactionTimeoutError', timeoutMs });
  }
}

export const isFerryError = (e: unknown): e is FerryError => e instanceof FerryError;
export const isValidationError = (e: unknown): e is ValidationError => e instanceof ValidationError;
export const isReservedSubjectError = (e: unknown): e is ReservedSubjectError => e instanceof ReservedSubjectError;
export const isConflictError = (e: unknown): e is ConflictError => e instanceof ConflictError;
export const isVersionOrderError = (e: unknown): e is VersionOrderError => e instanceof VersionOrderError;
export const isMigrationError = (e: unknown): e is MigrationError => e instanceof MigrationError;
export const isConfigError = (e: unknown): e is ConfigError => e instanceof ConfigError;
export const isTransactionTimeoutError = (e: unknown): e is TransactionTimeoutError => e instanceof TransactionTimeoutError;

/** The SQLSTATE of a `pg` error, if it is one. */
export function sqlState(e: unknown): string | undefined {
  if (typeof e === 'object' && e !== null && 'code' in e) {
    const code = (e as { code: unknown }).code;
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return code;
  }
  return undefined;
}

/** A short, safe rendering of a user value for an error message. */
export function describeValue(value: unknown, max = 80): string {
  let s: string;
  if (typeof value === 'string') s = JSON.stringify(value);
  else if (typeof value === 'bigint') s = `${value}n`;
  else if (value === undefined) s = 'undefined';
  else {
    try {
      s = JSON.stringify(value) ?? String(value);
    } catch {
      s = Object.prototype.toString.call(value);
    }
  }
  return s.length > max ? `${s.slice(0, max)}…(${s.length} chars)` : s;
}
