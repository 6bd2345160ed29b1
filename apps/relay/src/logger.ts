import { pino } from 'pino';
import { textRedactor } from './redact.js';
import type { Logger } from './types.js';

/** Field paths that never reach the log, whatever their value. */
export const REDACT_PATHS = [
  'password',
  'pass',
  'token',
  'seed',
  'nkeySeed',
  'creds',
  'databaseUrl',
  '*.password',
  '*.pass',
  '*.token',
  '*.seed',
  '*.nkeySeed',
  '*.databaseUrl',
  'nats.pass',
  'nats.token',
];

/**
 * The daemon's pino root: JSON lines on stdout, known secret fields redacted,
 * and, as a second fence, every written line passed through the CLI's text
 * redactor: each secret value (the database password, the NATS password,
 * token and nkey seed, URL-encoded or not) and the credential part of any URL
 * (`user:***@`, a NATS token `***@`) is masked wherever it appears (an error
 * message, a URL in a stack).
 */
export function createLogger(level: string, secrets: ReadonlyArray<string | undefined>, dest: NodeJS.WritableStream | number = 1): Logger {
  const redact = textRedactor(secrets);
  return pino(
    {
      level,
      base: { service: 'ferry-relay' },
      redact: { paths: REDACT_PATHS, censor: '***' },
      hooks: { streamWrite: redact },
    },
    typeof dest === 'number' ? pino.destination({ dest, sync: true }) : dest,
  ) as unknown as Logger;
}
