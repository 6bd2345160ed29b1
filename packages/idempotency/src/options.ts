import { DEFAULT_SCHEMA, describeValue, SILENT_LOGGER, ValidationError, validateIdentifier } from '@ferry/core';
import { type CompiledIdempotencyOptions, type IdempotencyOptions, type Logger, ON_CONCURRENT, type OnConcurrent } from './types.js';

const HOUR_MS = 3_600_000;
/** Keys live at least this long: shorter than a client's retry window, they protect nothing. */
export const MIN_RETENTION_MS = HOUR_MS;
export const MAX_RETENTION_MS = 366 * 24 * HOUR_MS;
export const DEFAULT_RETENTION = '24h';
export const DEFAULT_WAIT_MS = 10_000;
export const MAX_WAIT_MS = 300_000;
export const DEFAULT_SCOPE = 'default';
const MAX_SCOPE_LENGTH = 200;

const UNIT_MS = { m: 60_000, h: HOUR_MS, d: 24 * HOUR_MS } as const;
const DURATION = /^([1-9][0-9]{0,5})(m|h|d)$/;

/**
 * Parses a retention such as `'90m'`, `'24h'` or `'7d'` (or milliseconds) and
 * enforces the 1 h floor.
 */
export function parseRetention(value: unknown, field = 'retention'): number {
  let ms: number;
  if (typeof value === 'number') {
    ms = value;
  } else if (typeof value === 'string') {
    const m = DURATION.exec(value.trim());
    if (!m) {
      throw new ValidationError(
        field,
        `${field} ${describeValue(value)} is not a duration: use minutes, hours or days such as "90m", "24h" or "7d"`,
      );
    }
    ms = Number(m[1]) * UNIT_MS[m[2] as keyof typeof UNIT_MS];
  } else {
    throw new ValidationError(field, `${field} must be a duration such as "24h" or a number of milliseconds, got ${describeValue(value)}`);
  }
  if (!Number.isInteger(ms) || ms < MIN_RETENTION_MS || ms > MAX_RETENTION_MS) {
    throw new ValidationError(
      field,
      `${field} must be from 1 h to 366 d (keys kept shorter than the clients' retry window protect nothing), got ${describeValue(value)}`,
    );
  }
  return ms;
}

function validateLogger(logger: unknown): Logger {
  if (logger === undefined) return SILENT_LOGGER;
  const l = logger as Record<string, unknown>;
  if (typeof l !== 'object' || l === null || !['debug', 'info', 'warn', 'error'].every((m) => typeof l[m] === 'function')) {
    throw new ValidationError('logger', 'logger must be pino-compatible (debug, info, warn and error methods)');
  }
  return logger as Logger;
}

/** Applies every default and validates every option once, at construction. */
export function compileIdempotencyOptions(options: IdempotencyOptions = {}): CompiledIdempotencyOptions {
  if (typeof options !== 'object' || options === null) {
    throw new ValidationError('options', 'createIdempotency takes an options object, e.g. { scope: "orders-api" }');
  }
  const schema = validateIdentifier(options.schema ?? DEFAULT_SCHEMA, 'schema');
  const retentionMs = parseRetention(options.retention ?? DEFAULT_RETENTION);
  const scope = options.scope ?? DEFAULT_SCOPE;
  if (typeof scope !== 'string' || scope.length === 0 || scope.length > MAX_SCOPE_LENGTH) {
    throw new ValidationError('scope', `scope must be a string of 1-${MAX_SCOPE_LENGTH} characters, got ${describeValue(scope)}`);
  }
  const onConcurrent = options.onConcurrent ?? 'wait';
  if (!ON_CONCURRENT.includes(onConcurrent as OnConcurrent)) {
    throw new ValidationError(
      'onConcurrent',
      `onConcurrent must be one of ${ON_CONCURRENT.join(', ')}, got ${describeValue(onConcurrent)}`,
    );
  }
  const waitMs = options.waitMs ?? DEFAULT_WAIT_MS;
  if (!Number.isInteger(waitMs) || waitMs < 1 || waitMs > MAX_WAIT_MS) {
    throw new ValidationError('waitMs', `waitMs must be an integer from 1 to ${MAX_WAIT_MS}, got ${describeValue(waitMs)}`);
  }
  const storeClientErrors = options.storeClientErrors ?? true;
  if (typeof storeClientErrors !== 'boolean') {
    throw new ValidationError('storeClientErrors', `storeClientErrors must be true or false, got ${describeValue(storeClientErrors)}`);
  }
  const logger = validateLogger(options.logger);
  return Object.freeze({ schema, retentionMs, scope, onConcurrent, waitMs, storeClientErrors, logger });
}
