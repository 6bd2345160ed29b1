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

/** The secret parts of every URL in a text (passwords, NATS tokens), raw and percent-decoded. */
function urlSecrets(text: string): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(URL_USERINFO)) {
    const scheme = m[1] ?? '';
    const userinfo = m[2] ?? '';
    const colon = userinfo.indexOf(':');
    const secret = colon >= 0 ? userinfo.slice(colon + 1) : TOKEN_SCHEMES.test(scheme) ? userinfo : '';
    if (secret === '') continue;
    out.push(secret);
    try {
      out.push(decodeURIComponent(secret));
    } catch {
      // not percent-encoded: the raw form is enough
    }
  }
  return out;
}

/** Flags and FERRY_* variables whose whole value is a credential. */
const SECRET_FLAGS = ['--nats-password', '--nats-token', '--nats-nkey-seed'] as const;
const SECRET_VARIABLES = ['FERRY_NATS_PASSWORD', 'FERRY_NATS_TOKEN', 'FERRY_NATS_NKEY_SEED'] as const;
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

/**
 * Every credential a command line and its environment carry: secret flags and
 * variables, the secret parts of any URL among the arguments and URL
 * variables (parsed by pattern, so a URL no parser accepts still counts), and
 * the seed and JWT of a `--nats-creds` file.
 */
export function secretsOf(argv: readonly string[], env: NodeJS.ProcessEnv): string[] {
  const values: string[] = [];
  for (const flag of SECRET_FLAGS) values.push(...flagValues(argv, flag));
  for (const name of SECRET_VARIABLES) if (env[name]) values.push(env[name] as string);
  for (const a of argv) values.push(...urlSecrets(a));
  for (const name of URL_VARIABLES) if (env[name]) values.push(...urlSecrets(env[name] as string));
  for (const path of [...flagValues(argv, '--nats-creds'), env.FERRY_NATS_CREDS]) values.push(...credsFileSecrets(path));
  return values;
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
    const masked = text.replace(URL_USERINFO, (_all, scheme: string, userinfo: string) => `${scheme}://${maskUserinfo(scheme, userinfo)}@`);
    return pattern ? masked.replace(pattern, '***') : masked;
  };
}

/** A connection string with its password (or NATS token) replaced, safe to print. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    // nats://TOKEN@host: a NATS URL's user alone is a token.
    else if (u.username && TOKEN_SCHEMES.test(u.protocol.slice(0, -1))) u.username = '***';
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

/**
 * The passwords inside URLs, percent-decoded, for the log's secret filter: a
 * URL's password (postgres://user:password@host, nats://user:password@host),
 * or a NATS URL's user alone, which is a token (nats://token@host).
 */
export function urlPasswords(urls: readonly string[]): string[] {
  return urls.flatMap((u) => {
    try {
      const url = new URL(u);
      const secret = url.password || (TOKEN_SCHEMES.test(url.protocol.slice(0, -1)) ? url.username : '');
      return secret ? [decodeURIComponent(secret)] : [];
    } catch {
      return [];
    }
  });
}
