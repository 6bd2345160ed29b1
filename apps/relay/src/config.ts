import { ConfigError, describeValue, IDENTIFIER_PATTERN, validateLanes } from '@ferry/core';
import { type Command, InvalidArgumentError, Option } from 'commander';

/**
 * Small explicit parsers for CLI flags and FERRY_* env vars. Each throws
 * commander's InvalidArgumentError, which the CLI turns into exit code 2 and
 * one line naming the option, the value and what is accepted.
 */
export function parseSchema(value: string): string {
  if (!IDENTIFIER_PATTERN.test(value)) {
    throw new InvalidArgumentError(
      `${describeValue(value, 40)} is not a valid schema name: use 1-63 characters of a-z, 0-9 and _, starting with a letter or _`,
    );
  }
  return value;
}

export function parseIntIn(min: number, max: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!/^-?\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < min || n > max) {
      throw new InvalidArgumentError(`${describeValue(value, 40)} is not an integer from ${min} to ${max}`);
    }
    return n;
  };
}

export function parseLanes(value: string): number {
  return validateLanes(parseIntIn(1, 1024)(value));
}

export function parseDatabaseUrl(value: string): string {
  if (!/^postgres(ql)?:\/\//.test(value)) {
    throw new InvalidArgumentError(
      'A PostgreSQL URL starts with postgres:// or postgresql://, e.g. postgres://user:password@host:5432/database',
    );
  }
  try {
    new URL(value);
  } catch {
    throw new InvalidArgumentError(
      'It does not parse as a URL; write it as postgres://user:password@host:5432/database (percent-encode @, : and / in the password)',
    );
  }
  return value;
}

/** `--database-url`, from FERRY_DATABASE_URL, then DATABASE_URL. */
export function databaseUrlOption(): Option {
  return new Option('--database-url <url>', 'PostgreSQL connection URL (env FERRY_DATABASE_URL, then DATABASE_URL)').argParser(
    parseDatabaseUrl,
  );
}

/** `--schema`, from FERRY_SCHEMA, default `ferry`. */
export function schemaOption(): Option {
  return new Option('--schema <name>', 'schema of the Ferry tables').env('FERRY_SCHEMA').default('ferry').argParser(parseSchema);
}

/** The database URL from the flag, FERRY_DATABASE_URL or DATABASE_URL. */
export function resolveDatabaseUrl(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  const url = flag ?? env.FERRY_DATABASE_URL ?? env.DATABASE_URL;
  if (!url) {
    throw new ConfigError('--database-url', 'no database: pass --database-url, or set FERRY_DATABASE_URL or DATABASE_URL');
  }
  try {
    return parseDatabaseUrl(url);
  } catch (err) {
    throw new ConfigError('--database-url', `--database-url ${(err as Error).message}`);
  }
}

/** A connection string with its password (or NATS token) replaced, safe to print. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    // nats://TOKEN@host: a NATS URL's user alone is a token.
    else if (u.username && /^(nats|natss|tls|ws|wss):$/.test(u.protocol)) u.username = '***';
    for (const k of ['password', 'sslpassword', 'token']) if (u.searchParams.has(k)) u.searchParams.set(k, '***');
    return u.toString();
  } catch {
    return '<unparseable url>';
  }
}

/** NATS URLs safe to print: a password inside one (nats://user:password@host) becomes ***. */
export function redactNatsUrls(urls: readonly string[]): string[] {
  return urls.map((u) => (u.includes('@') ? redactUrl(u) : u));
}

/** The passwords and tokens inside NATS URLs (nats://user:password@host, nats://token@host), for the log's secret filter. */
export function natsUrlPasswords(urls: readonly string[]): string[] {
  return urls.flatMap((u) => {
    try {
      const url = new URL(u);
      const secret = url.password || url.username;
      return secret ? [decodeURIComponent(secret)] : [];
    } catch {
      return [];
    }
  });
}

const DURATION = /^(\d+)(ms|s|m|h|d)$/;
const DURATION_UNITS_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/** `7d`, `12h`, `30m`, `45s`, `500ms` → milliseconds. */
export function parseDuration(value: string): number {
  const m = DURATION.exec(value.trim());
  const ms = m ? Number(m[1]) * DURATION_UNITS_MS[m[2] as keyof typeof DURATION_UNITS_MS] : Number.NaN;
  if (!m || !Number.isSafeInteger(ms) || ms > 3650 * 86_400_000) {
    throw new InvalidArgumentError(
      `${describeValue(value, 40)} is not a duration: use a whole number with ms, s, m, h or d, e.g. 7d or 12h`,
    );
  }
  return ms;
}

/** A duration as `parseDuration` reads it: the largest unit that divides it exactly (604800000 → 7d). */
export function formatDuration(ms: number): string {
  for (const unit of ['d', 'h', 'm', 's'] as const) {
    const size = DURATION_UNITS_MS[unit];
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}

/** `auto` or an integer from 1 to 1024. */
export function parseLanesPerInstance(value: string): number | 'auto' {
  if (value.trim() === 'auto') return 'auto';
  try {
    return parseIntIn(1, 1024)(value);
  } catch {
    throw new InvalidArgumentError(`${describeValue(value, 40)} is not "auto" or an integer from 1 to 1024`);
  }
}

/** A comma-separated list of nats:// (or tls://, ws://) URLs or host:port pairs. */
export function parseNatsUrls(value: string): string[] {
  const urls = value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  const ok = (u: string) => /^(nats|tls|ws|wss):\/\/[^\s/]+/.test(u) || /^[A-Za-z0-9.-]+(:\d{1,5})?$/.test(u);
  if (urls.length === 0 || !urls.every(ok)) {
    // The value is not echoed: a NATS URL may carry a password or a token (the CLI masks them too).
    const bad = urls.find((u) => !ok(u)) ?? '';
    throw new InvalidArgumentError(
      `is not a list of NATS URLs (entry ${urls.indexOf(bad) + 1} of ${urls.length}, scheme ${describeValue(/^([^:/]*):\/\//.exec(bad)?.[1] ?? 'none', 20)}): use nats://host:4222, tls://host:4222, ws:// or wss://, comma-separated for several`,
    );
  }
  return urls;
}

/** `NAME=SUBJECT[,SUBJECT]`, repeatable. */
export function parseEnsureStream(value: string, previous: Array<{ name: string; subjects: string[] }> = []) {
  const m = /^([A-Za-z0-9_-]{1,64})=(.+)$/.exec(value.trim());
  const subjects = m?.[2]?.split(',').map((s) => s.trim()) ?? [];
  if (!m || subjects.length === 0 || subjects.some((s) => !/^[^\s]+$/.test(s) || s.startsWith('.') || s.endsWith('.'))) {
    throw new InvalidArgumentError(`${describeValue(value, 60)} is not NAME=SUBJECT[,SUBJECT], e.g. ORDERS=orders.>`);
  }
  return [...previous, { name: m[1] as string, subjects }];
}

export function parseBoolean(value: string): boolean {
  const v = value.trim().toLowerCase();
  if (['1', 'true', 'yes', 'on'].includes(v)) return true;
  if (['0', 'false', 'no', 'off'].includes(v)) return false;
  throw new InvalidArgumentError(`${describeValue(value, 40)} is not a boolean: use true or false`);
}

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/** What `addNatsOptions` parses. */
export interface NatsFlags {
  natsUrl: string[];
  natsUser?: string;
  natsPassword?: string;
  natsToken?: string;
  natsNkeySeed?: string;
  natsCreds?: string;
  natsTlsCa?: string;
  natsTlsCert?: string;
  natsTlsKey?: string;
}

/** The NATS connection flags (URLs, credentials, TLS) of every command that talks to NATS, with their FERRY_* variables. */
export function addNatsOptions(cmd: Command): Command {
  return cmd
    .addOption(
      new Option('--nats-url <urls>', 'NATS server URLs, comma-separated')
        .env('FERRY_NATS_URL')
        .default(['nats://127.0.0.1:4222'], 'nats://127.0.0.1:4222')
        .argParser(parseNatsUrls),
    )
    .addOption(new Option('--nats-user <user>', 'NATS user (with --nats-password)').env('FERRY_NATS_USER'))
    .addOption(new Option('--nats-password <password>', 'NATS password').env('FERRY_NATS_PASSWORD'))
    .addOption(new Option('--nats-token <token>', 'NATS token').env('FERRY_NATS_TOKEN'))
    .addOption(new Option('--nats-nkey-seed <seed>', 'NATS nkey seed (SU…)').env('FERRY_NATS_NKEY_SEED'))
    .addOption(new Option('--nats-creds <file>', 'NATS credentials file (JWT + seed)').env('FERRY_NATS_CREDS'))
    .addOption(new Option('--nats-tls-ca <file>', 'CA certificate file to verify the NATS server').env('FERRY_NATS_TLS_CA'))
    .addOption(new Option('--nats-tls-cert <file>', 'client certificate file for NATS mutual TLS').env('FERRY_NATS_TLS_CERT'))
    .addOption(new Option('--nats-tls-key <file>', 'client key file for NATS mutual TLS').env('FERRY_NATS_TLS_KEY'));
}
