import { ConfigError, describeValue, IDENTIFIER_PATTERN, validateLanes } from '@ferry/core';
import { InvalidArgumentError, Option } from 'commander';

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
    throw new InvalidArgumentError('is not a PostgreSQL URL: use postgres://user:password@host:5432/database');
  }
  try {
    new URL(value);
  } catch {
    throw new InvalidArgumentError('is not a valid URL: use postgres://user:password@host:5432/database');
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

/** A connection string with its password replaced, safe to print. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    for (const k of ['password', 'sslpassword', 'token']) if (u.searchParams.has(k)) u.searchParams.set(k, '***');
    return u.toString();
  } catch {
    return '<unparseable url>';
  }
}
