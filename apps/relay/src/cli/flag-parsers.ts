import { describeValue, IDENTIFIER_PATTERN, validateLanes } from '@ferry/core';
import { InvalidArgumentError } from 'commander';

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
