import { pino } from 'pino';
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

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/**
 * The daemon's pino root: JSON lines on stdout, known secret fields redacted,
 * and, as a second fence, every secret value (the database password, the
 * NATS password, token and nkey seed) replaced by `***` in the written line,
 * wherever it appears (an error message, a URL in a stack).
 */
export function createLogger(level: string, secrets: ReadonlyArray<string | undefined>, dest: NodeJS.WritableStream | number = 1): Logger {
  const values = [...new Set(secrets.filter((s): s is string => typeof s === 'string' && s.length >= 3))];
  // Also the URL-encoded form, as the secret appears inside a connection string.
  const forms = [...new Set(values.flatMap((v) => [v, encodeURIComponent(v), JSON.stringify(v).slice(1, -1)]))];
  const pattern =
    forms.length > 0
      ? new RegExp(
          forms
            .sort((a, b) => b.length - a.length)
            .map(escapeRegExp)
            .join('|'),
          'g',
        )
      : undefined;
  return pino(
    {
      level,
      base: { service: 'ferry-relay' },
      redact: { paths: REDACT_PATHS, censor: '***' },
      hooks: pattern ? { streamWrite: (line: string) => line.replace(pattern, '***') } : {},
    },
    typeof dest === 'number' ? pino.destination({ dest, sync: true }) : dest,
  ) as unknown as Logger;
}
