import { readFileSync } from 'node:fs';

// The one place that decides what a credential looks like in text. Everything
// the CLI prints (ctx.out/ctx.err: results, --json, errors, commander's own
// "argument '…' is invalid" lines) and every log line the relay writes passes
// through `redactText`, so a credential is masked whatever printed it: a
// URL's password, a NATS token written as a URL's user (nats://TOKEN@host),
// a malformed URL that no URL parser accepts, or a value given in a flag, a
// FERRY_* variable or a credentials file.

/** Schemes whose URL user alone is a credential (a NATS token). */
const TOKEN_SCHEMES = /^(nats|natss|tls|ws|wss)$/i;
/**
 * `scheme://userinfo@` anywhere in a text, malformed or not. The userinfo runs
 * to the last `@` before a space, `/`, `?`, `#`, quote or comma, so a password
 * holding an `@` is masked whole.
 */
const URL_USERINFO = /\b([a-z][a-z0-9+.-]*):\/\/([^\s/?#'",]*)@/gi;

function maskUserinfo(scheme: string, userinfo: string): string {
  const colon = userinfo.indexOf(':');
  if (colon >= 0) return `${userinfo.slice(0, colon)}:***`;
  return TOKEN_SCHEMES.test(scheme) ? '***' : userinfo;
}

/** Query parameters whose value is a credential: node-postgres reads `?password=` as the password. */
const QUERY_SECRET_NAMES = ['password', 'sslpassword', 'pass', 'token', 'auth_token'] as const;
/** `?password=…` or `&password=…` anywhere in a text: the value runs to the next `&`, `#`, space, quote or comma. */
const QUERY_SECRET = new RegExp(`([?&](?:${QUERY_SECRET_NAMES.join('|')})=)[^&#\\s'",]*`, 'gi');

function decoded(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return value; // a stray % (not an escape): the raw form is what is used
  }
}

/** A URL split by hand at its userinfo: what no URL parser needs to accept. */
export interface UrlParts {
  /** The scheme, without `://`. */
  scheme: string;
  /** Everything before the `@` that ends the userinfo, as written (percent-encoded or not); `''` when none. */
  userinfo: string;
  /** The URL without its userinfo: `scheme://host:port…`, safe to print. */
  bare: string;
}

/**
 * Splits `scheme://userinfo@rest` at the last `@`, so a password or token that
 * holds an unencoded `@`, `/`, `?` or `#` stays whole (nats://to/ken@host);
 * a host never holds an `@`. `undefined` when the text has no `scheme://`.
 */
export function splitUserinfo(url: string): UrlParts | undefined {
  const m = /^([a-z][a-z0-9+.-]*):\/\/(.*)$/is.exec(url.trim());
  if (!m) return undefined;
  const scheme = m[1] as string;
  const rest = m[2] as string;
  const at = rest.lastIndexOf('@');
  if (at < 0) return { scheme, userinfo: '', bare: `${scheme}://${rest}` };
  return { scheme, userinfo: rest.slice(0, at), bare: `${scheme}://${rest.slice(at + 1)}` };
}

/** The secret of a userinfo: the password after the first `:`, or the whole of it for a NATS token. */
function userinfoSecret(scheme: string, userinfo: string): string {
  const colon = userinfo.indexOf(':');
  if (colon >= 0) return userinfo.slice(colon + 1);
  return TOKEN_SCHEMES.test(scheme) ? userinfo : '';
}

/**
 * Every credential one configured URL value carries, raw and percent-decoded:
 * the password (or NATS token) of its userinfo, read both up to the last `@`
 * (a password holding `/`, `?` or `#`) and up to the first `@` of its
 * authority (a query holding an `@`), each comma-separated entry of a NATS
 * list on its own, and the values of `?password=`-like query parameters.
 * Over-masking costs a readable host; under-masking costs a password.
 */
export function credentialsIn(value: string): string[] {
  const out: string[] = [];
  const add = (secret: string) => {
    if (secret !== '') out.push(secret, decoded(secret));
  };
  for (const entry of new Set([value, ...value.split(',')])) {
    const parts = splitUserinfo(entry);
    if (!parts) continue;
    const secret = userinfoSecret(parts.scheme, parts.userinfo);
    add(secret);
    // Its pieces too: a parser that stopped at an unencoded / ? # , or space may quote one of them
    // (as a port, a path, a query) in its own error.
    for (const piece of secret.split(/[/?#,\s']/)) if (piece.length >= 4 && piece !== secret) add(piece);
    const authority = /^[a-z][a-z0-9+.-]*:\/\/([^/?#]*)/i.exec(entry.trim())?.[1] ?? '';
    const at = authority.lastIndexOf('@');
    if (at >= 0) add(userinfoSecret(parts.scheme, authority.slice(0, at)));
  }
  for (const m of value.matchAll(QUERY_SECRET)) add(m[0].slice(m[1]?.length ?? 0));
  return [...new Set(out)];
}

/** The secret parts of every URL in a free text (passwords, NATS tokens), raw and percent-decoded. */
function urlSecrets(text: string): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(URL_USERINFO)) {
    const secret = userinfoSecret(m[1] ?? '', m[2] ?? '');
    if (secret !== '') out.push(secret, decoded(secret));
  }
  return out;
}

/** Flags and FERRY_* variables whose whole value is a credential. */
const SECRET_FLAGS = ['--nats-password', '--nats-token', '--nats-nkey-seed'] as const;
const SECRET_VARIABLES = [
  'FERRY_NATS_PASSWORD',
  'FERRY_NATS_TOKEN',
  'FERRY_NATS_NKEY_SEED',
  'FERRY_CONSOLE_TOKEN',
  'FERRY_CONSOLE_BASIC_AUTH',
] as const;
/** Variables that may hold a URL with a credential in it. */
const URL_VARIABLES = ['FERRY_DATABASE_URL', 'DATABASE_URL', 'FERRY_NATS_URL'] as const;
/** An nkey seed (S + role letter + base32) or a JWT, as they sit on a line of a `.creds` file. */
const CREDS_SECRET = /\b(S[A-Z][A-Z2-7]{40,}|eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*)\b/g;

/** The value of `--flag V` or `--flag=V` in argv. */
function flagValues(argv: readonly string[], flag: string): string[] {
  const out: string[] = [];
  for (const [i, a] of argv.entries()) {
    if (a === flag && argv[i + 1] !== undefined) out.push(argv[i + 1] as string);
    else if (a.startsWith(`${flag}=`)) out.push(a.slice(flag.length + 1));
  }
  return out;
}

function credsFileSecrets(path: string | undefined): string[] {
  if (!path) return [];
  try {
    return [...readFileSync(path, 'utf8').matchAll(CREDS_SECRET)].map((m) => m[1] ?? '').filter((s) => s !== '');
  } catch {
    return [];
  }
}

/** Flags whose value is a connection URL (a NATS list: comma-separated URLs). */
const URL_FLAGS = ['--database-url', '--nats-url'] as const;

/** Whether a URL value (each entry of a NATS list) parses; one that does not is masked whole. */
function parses(value: string): boolean {
  return value.split(',').every((entry) => {
    try {
      new URL(entry.trim().includes('://') ? entry.trim() : `nats://${entry.trim()}`);
      return true;
    } catch {
      return false;
    }
  });
}

/** The credentials of a configured URL value; the whole value when it does not parse (a password with an unencoded `/`, `#`, `?`, a bad port). */
function configuredUrlSecrets(value: string): string[] {
  return [...credentialsIn(value), ...(parses(value) ? [] : [value])];
}

/**
 * Every credential a command line and its environment carry: secret flags and
 * variables, the credentials of `--database-url`, `--nats-url` and any other
 * URL among the arguments and the URL variables (split by hand, so a URL no
 * parser accepts still counts, and masked whole when it does not parse), and
 * the seed and JWT of a `--nats-creds` file.
 */
export function secretsOf(argv: readonly string[], env: NodeJS.ProcessEnv): string[] {
  const values: string[] = [];
  for (const flag of SECRET_FLAGS) values.push(...flagValues(argv, flag));
  for (const name of SECRET_VARIABLES) if (env[name]) values.push(env[name] as string);
  for (const flag of URL_FLAGS) for (const v of flagValues(argv, flag)) values.push(...configuredUrlSecrets(v));
  for (const a of argv) values.push(...urlSecrets(a), ...credentialsIn(a));
  for (const name of URL_VARIABLES) if (env[name]) values.push(...configuredUrlSecrets(env[name] as string));
  for (const path of [...flagValues(argv, '--nats-creds'), env.FERRY_NATS_CREDS]) values.push(...credsFileSecrets(path));
  return values;
}

/** The variable each credential-bearing flag can be given as instead. */
const FLAG_VARIABLES: ReadonlyMap<string, string> = new Map([
  ['--nats-password', 'FERRY_NATS_PASSWORD'],
  ['--nats-token', 'FERRY_NATS_TOKEN'],
  ['--nats-nkey-seed', 'FERRY_NATS_NKEY_SEED'],
  ['--database-url', 'FERRY_DATABASE_URL'],
  ['--nats-url', 'FERRY_NATS_URL'],
]);

/**
 * The flags of a command line that carry a credential, each with the variable
 * to use instead: a secret flag, or a URL flag whose value holds a password,
 * a token or a `?password=`. A process cannot hide its argv (Node cannot
 * rewrite /proc/<pid>/cmdline), so the CLI can only say so.
 */
export function credentialFlagsOf(argv: readonly string[]): Array<{ flag: string; variable: string }> {
  const out: Array<{ flag: string; variable: string }> = [];
  for (const [flag, variable] of FLAG_VARIABLES) {
    const values = flagValues(argv, flag);
    const secret = (SECRET_FLAGS as readonly string[]).includes(flag) ? values.length > 0 : values.some((v) => credentialsIn(v).length > 0);
    if (secret) out.push({ flag, variable });
  }
  return out;
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** A function that masks URL credentials and each of `secrets` (also URL- and JSON-encoded) in a text. */
export function textRedactor(secrets: ReadonlyArray<string | undefined>): (text: string) => string {
  const values = [...new Set(secrets.filter((s): s is string => typeof s === 'string' && s.trim().length >= 3).map((s) => s.trim()))];
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
  return (text) => {
    const masked = text
      .replace(URL_USERINFO, (_all, scheme: string, userinfo: string) => `${scheme}://${maskUserinfo(scheme, userinfo)}@`)
      .replace(QUERY_SECRET, '$1***');
    return pattern ? masked.replace(pattern, '***') : masked;
  };
}

/** A connection string with its password (or NATS token) and `?password=`-like parameters replaced, safe to print. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    // nats://TOKEN@host: a NATS URL's user alone is a token.
    else if (u.username && TOKEN_SCHEMES.test(u.protocol.slice(0, -1))) u.username = '***';
    for (const k of QUERY_SECRET_NAMES) if (u.searchParams.has(k)) u.searchParams.set(k, '***');
    return u.toString();
  } catch {
    // Never the text itself: what made it unparseable may be an unencoded character of its password.
    return '<unparseable url>';
  }
}

/**
 * NATS URLs safe to print: `nats://user:***@host`, a token as `nats://***@host`.
 * Split by hand at the last `@`, as the connection options are built, so a
 * token holding a `/` (nats://to/ken@host) is masked whole.
 */
export function redactNatsUrls(urls: readonly string[]): string[] {
  return urls.map((u) => {
    const parts = splitUserinfo(u);
    if (!parts || parts.userinfo === '') return u;
    const colon = parts.userinfo.indexOf(':');
    const masked = colon >= 0 ? `${parts.userinfo.slice(0, colon)}:***` : '***';
    return parts.bare.replace('://', `://${masked}@`);
  });
}

/** The credentials inside configured URLs, for the log's secret filter (see `credentialsIn`). */
export function urlPasswords(urls: readonly string[]): string[] {
  return urls.flatMap(configuredUrlSecrets);
}
