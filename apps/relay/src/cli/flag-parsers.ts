import { isIP } from 'node:net';
import { ConfigError, describeValue, IDENTIFIER_PATTERN, validateLanes } from '@ferry/core';
import { InvalidArgumentError } from 'commander';
import { splitUserinfo } from '../redact.js';

/**
 * Small explicit parsers for CLI flags and FERRY_* env vars. Each throws
 * commander's InvalidArgumentError, which the CLI turns into exit code 2 and
 * one line naming the option, the value and what is accepted; the URL parsers
 * throw a ConfigError instead (exit 2 too), whose line never holds the value.
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

/** Why a URL flag's value is never echoed in its error. */
const VALUE_HIDDEN = 'value hidden: it may hold a password';
/** How to write a password that holds a reserved character. */
const PERCENT_ENCODE =
  'percent-encode reserved characters of the user and password (/ as %2F, # as %23, ? as %3F, @ as %40, : as %3A, % as %25, space as %20)';

/**
 * A PostgreSQL URL. Its errors are ConfigErrors, not commander's
 * InvalidArgumentError: commander would print the value whole ("argument
 * 'postgres://u:pass/word@…' is invalid"), and the very thing that broke the
 * URL is often an unencoded character of its password.
 */
export function parseDatabaseUrl(value: string): string {
  if (!/^postgres(ql)?:\/\//.test(value)) {
    throw new ConfigError(
      '--database-url',
      `--database-url is not a PostgreSQL URL (${VALUE_HIDDEN}): it starts with postgres:// or postgresql://, e.g. postgres://user@host:5432/database`,
    );
  }
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new ConfigError(
      '--database-url',
      `--database-url is not a valid URL (${VALUE_HIDDEN}): ${PERCENT_ENCODE}, and give a port from 1 to 65535`,
    );
  }
  // postgres://u:5/x@host/db parses, as host "u", port 5 and database "x@host/db": an unencoded /, # or ?
  // in a password that starts with digits (or in a user: postgres://u?ser:pw@host). Refused, or the
  // password would travel as a database name or a query.
  if (url.username === '' && `${url.pathname}${url.search}${url.hash}`.includes('@')) {
    throw new ConfigError('--database-url', `--database-url has an @ after its host and no user (${VALUE_HIDDEN}): ${PERCENT_ENCODE}`);
  }
  return value;
}

/** An address to listen on: an IPv4 or IPv6 address, or a host name (localhost). */
export function parseHost(value: string): string {
  const v = value.trim();
  if (
    isIP(v) === 0 &&
    !/^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/.test(v)
  ) {
    throw new InvalidArgumentError(
      `${describeValue(value, 60)} is not an address to listen on: use 127.0.0.1 (this host only), 0.0.0.0 (every IPv4 interface), ::, an interface's address or a host name`,
    );
  }
  return v;
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

/**
 * A comma-separated list of nats:// (or tls://, ws://) URLs or host:port pairs.
 * A URL may carry `user:password@` or `token@` (split at the last `@`, so a
 * token may hold a `/`); `natsConnectOptions` turns them into credentials.
 * Errors are ConfigErrors that never echo the value (see parseDatabaseUrl).
 */
export function parseNatsUrls(value: string): string[] {
  const urls = value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  const ok = (u: string) => {
    const bare = splitUserinfo(u)?.bare;
    return bare === undefined ? /^[A-Za-z0-9.-]+(:\d{1,5})?$/.test(u) : /^(nats|tls|ws|wss):\/\/[^\s/@]+/.test(bare);
  };
  if (urls.length === 0 || !urls.every(ok)) {
    const bad = urls.find((u) => !ok(u)) ?? '';
    const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(bad)?.[1];
    throw new ConfigError(
      '--nats-url',
      `--nats-url (FERRY_NATS_URL) is not a list of NATS URLs (${VALUE_HIDDEN}; entry ${urls.indexOf(bad) + 1} of ${urls.length}, scheme ${describeValue(scheme ?? 'none', 20)}): use nats://host:4222, tls://host:4222, ws:// or wss://, comma-separated for several`,
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

/** A core validator (it throws a ValidationError) as a flag parser (it throws commander's InvalidArgumentError, exit 2). */
export function validatorParser<T>(validate: (value: string) => T): (value: string) => T {
  return (value) => {
    try {
      return validate(value);
    } catch (err) {
      throw new InvalidArgumentError((err as Error).message);
    }
  };
}

/** `--expect-selection`: the 64-hex selection digest a `--dry-run` printed. */
export function parseSelectionDigest(value: string): string {
  if (!/^[0-9a-f]{64}$/.test(value)) {
    throw new InvalidArgumentError(`${describeValue(value, 80)} is not a selection digest: pass the 64 hex digits a --dry-run printed`);
  }
  return value;
}
