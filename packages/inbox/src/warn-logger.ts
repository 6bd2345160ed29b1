import type { Logger } from './types.js';

/** Renders one log field for a single line: an error as its message, an object as JSON. */
function field(value: unknown): string {
  if (value instanceof Error) return JSON.stringify(value.message);
  if (typeof value === 'string') return /^[\w.:@/-]+$/.test(value) ? value : JSON.stringify(value);
  if (typeof value === 'bigint') return String(value);
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

/**
 * The inbox's default logger: `warn` and `error` as one line each on stderr,
 * `debug` and `info` dropped. A library may be quiet, but a failing handler,
 * a parked event or a consumer that stopped must show somewhere by default:
 * with a silent default they redelivered with no output at all (issue 16).
 * Pass your pino logger as `logger` to route them, or `SILENT_LOGGER` to mute.
 *
 * @example
 * // ferry inbox warn: inbox handler failed id=0192… key=order-1 attempt=1 err="boom"
 */
export function createWarnLogger(write: (line: string) => void = (line) => process.stderr.write(line)): Logger {
  const emit = (level: 'warn' | 'error') => (obj: object, msg?: string) => {
    const fields = Object.entries(obj ?? {})
      .filter(([, v]) => v !== undefined)
      .map(([k, v]) => `${k}=${field(v)}`);
    write(`ferry inbox ${level}: ${[msg ?? '', ...fields].join(' ').trim()}\n`);
  };
  const noop = () => {};
  return Object.freeze({ debug: noop, info: noop, warn: emit('warn'), error: emit('error') });
}

/** The default `logger` of `createInbox`: warnings and errors on stderr. */
export const WARN_LOGGER: Logger = createWarnLogger();
