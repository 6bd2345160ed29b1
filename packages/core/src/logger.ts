/**
 * The logger every Ferry part accepts: a pino logger fits as is, and so does
 * anything with these four methods. Ferry logs an object of fields first and
 * the message second, errors under `err`.
 *
 * @example
 * import pino from 'pino';
 * createInbox({ …, logger: pino().child({ component: 'inbox' }) });
 */
export interface Logger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
  /** pino's `child`: components bind their name to it; a logger without one is used as it is (see {@link childLogger}). */
  child?(bindings: Record<string, unknown>): Logger;
}

const noop = () => {};

/** A logger that drops everything: the default of the library parts, and how to mute the inbox's warn lines. */
export const SILENT_LOGGER: Logger = Object.freeze({
  debug: noop,
  info: noop,
  warn: noop,
  error: noop,
  child: () => SILENT_LOGGER,
});

/** `logger.child(bindings)`, or `logger` itself when it has no `child`. */
export function childLogger(logger: Logger, bindings: Record<string, unknown>): Logger {
  return logger.child?.(bindings) ?? logger;
}
