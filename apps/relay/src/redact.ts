import { readFileSync } from 'node:fs';

// The one place that decides what a credential looks like in text. Everything
// the CLI prints (ctx.out/ctx.err: results, --json, errors, commander's own
// "argument '…' is invalid" lines) and every log line the relay writes passes
// through `redactText`, so a credential is masked whatever printed it: a
// URL's password, a NATS token written as a URL's user (nats://TOKEN@host),
// a malformed URL that no URL parser accepts, or a value given in a flag, a
// FERRY_* variable or a credentials file.
//
// Longer than our ~350 lines on purpose: what a URL's secret is (credentialsIn), how a line is
// masked (textRedactor) and how a URL is printed (redactUrl) must keep one rule for where a secret
// ends, so they stay side by side (issue 42 item 5 was the printer keeping a fragment that was a
// password's tail).

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
/**
 * Query parameters node-postgres reads that are not secrets. A secret
 * parameter's value ends only at an `&` that begins one of these (or another
 * secret one), never at a bare `&`, `#`, `?`, `/`, `@`, `%` or `+`: a password
 * written unencoded (`?password=Qs3kr#3tValue`, `?password=a&b`) is masked
 * whole, and a URL parser's fragment or stray parameter made of its tail too.
 */
const QUERY_KNOWN_NAMES = [
  'user',
  'host',
  'port',
  'database',
  'dbname',
  'ssl',
  'sslmode',
  'sslcert',
  'sslkey',
  'sslrootcert',
  'application_name',
  'fallback_application_name',
  'options',
  'client_encoding',
  'replication',
  'connect_timeout',
  'statement_timeout',
  'query_timeout',
  'lock_timeout',
  'idle_in_transaction_session_timeout',
  'keepalives',
  'keepalives_idle',
  'target_session_attrs',
  'binary',
  'uselibpqcompat',
] as const;
const QUERY_SECRET_START = `[?&](?:${QUERY_SECRET_NAMES.join('|')})=`;
/** Where a secret parameter's value ends: the `&` of a parameter node-postgres knows. */
const QUERY_NEXT_PARAM = `&(?:${[...QUERY_KNOWN_NAMES, ...QUERY_SECRET_NAMES].join('|')})=`;
/**
 * `?password=…` or `&password=…` anywhere in a text: the value runs to the
 * next `&` of a known parameter, or to a space, quote or comma (where a URL
 * in a line of text ends) — through a `#` fragment, a `?`, `/`, `@`, `%`,
 * `+` and an `&` that begins no known parameter.
 */
const QUERY_SECRET = new RegExp(`(${QUERY_SECRET_START})(?:(?!${QUERY_NEXT_PARAM})[^\\s'",])*`, 'gi');
/** The same in one configured URL, whose end is known: a space, quote or comma inside the value is part of it. */
const QUERY_SECRET_IN_URL = new RegExp(`(${QUERY_SECRET_START})((?:(?!${QUERY_NEXT_PARAM})[\\s\\S])*)`, 'gi');
/** Where a secret may be cut by a parser or a printer: the pieces between these are masked on their own. */
const PIECE_BREAK = /[/?#&@%+,\s'"]/;
/** Pieces shorter than this are not masked on their own: too likely to be other text ("db", "app"). */
const MIN_PIECE = 4;

function decoded(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return value; // a stray % (not an escape): the raw form is what is used
  }
}

/** A query value as URLSearchParams (node-postgres) reads it: `+` is a space. */
function formDecoded(value: string): string {
  return decoded(value.replaceAll('+', ' '));
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
    if (secret !== '') out.push(secret, decoded(secret), formDecoded(secret));
  };
  // A secret and its pieces: a parser that stopped at an unencoded / ? # & @ % + , or space may quote
  // one of them (as a port, a path, a query, a fragment) in its own error.
  const addWhole = (secret: string) => {
    add(secret);
    for (const piece of secret.split(PIECE_BREAK)) if (piece.length >= MIN_PIECE && piece !== secret) add(piece);
  };
  // A PostgreSQL URL is one URL (a comma in it is a character of a value); a NATS value is a list.
  const entries = /^\s*postgres(ql)?:\/\//i.test(value) ? [value] : [...new Set([value, ...value.split(',')])];
  for (const entry of entries) {
    const parts = splitUserinfo(entry);
    if (!parts) continue;
    const secret = userinfoSecret(parts.scheme, parts.userinfo);
    addWhole(secret);
    const authority = /^[a-z][a-z0-9+.-]*:\/\/([^/?#]*)/i.exec(entry.trim())?.[1] ?? '';
    const at = authority.lastIndexOf('@');
    if (at >= 0) add(userinfoSecret(parts.scheme, authority.slice(0, at)));
    let querySecret = false;
    for (const m of entry.trim().matchAll(QUERY_SECRET_IN_URL)) {
      querySecret = true;
      addWhole(m[2] ?? '');
    }
    // A connection URL's fragment means nothing to PostgreSQL or NATS: in a URL with a credential
    // it is the tail of a password written with an unencoded #.
    if (secret !== '' || querySecret) addWhole(fragmentOf(entry, parts));
  }
  for (const m of value.matchAll(QUERY_SECRET)) add(m[0].slice(m[1]?.length ?? 0));
  return [...new Set(out)];
}

/**
 * The fragment (after `#`) of one URL as written, where the client that reads it finds it; `''`
 * when none. node-postgres parses the URL, so a PostgreSQL URL's fragment starts at its first `#`
 * (an @ in the fragment moves the last @: the split at it would miss the fragment's tail); a NATS
 * URL is split at its last @, so its fragment is the first `#` after that.
 */
function fragmentOf(entry: string, parts: UrlParts): string {
  const text = /^postgres(ql)?$/i.test(parts.scheme) ? entry.trim() : parts.bare;
  const hash = text.indexOf('#');
  return hash < 0 ? '' : text.slice(hash + 1).trim();
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

/** encodeURI, which throws on a lone surrogate: then the raw form stands for it. */
function safeEncodeURI(v: string): string {
  try {
    return encodeURI(v);
  } catch {
    return v;
  }
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** A function that masks URL credentials and each of `secrets` (also URL- and JSON-encoded) in a text. */
export function textRedactor(secrets: ReadonlyArray<string | undefined>): (text: string) => string {
  const values = [...new Set(secrets.filter((s): s is string => typeof s === 'string' && s.trim().length >= 3).map((s) => s.trim()))];
  // Raw, percent-encoded (as a URL component, as encodeURI leaves it, as a query's form encoding, with
  // a space as +) and JSON-escaped: every form a printer of a URL or a value may give it.
  const forms = [
    ...new Set(
      values.flatMap((v) => [
        v,
        encodeURIComponent(v),
        safeEncodeURI(v),
        new URLSearchParams([['', v]]).toString().slice(1),
        JSON.stringify(v).slice(1, -1),
      ]),
    ),
  ];
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

const QUERY_NAMES: ReadonlySet<string> = new Set([...QUERY_KNOWN_NAMES, ...QUERY_SECRET_NAMES]);
/** A query parameter's name that may be printed: a word, not a fragment of something else. */
const PRINTABLE_NAME = /^[A-Za-z_][A-Za-z0-9_.-]{0,62}$/;

/**
 * The query and fragment of a connection URL (`?…#…`, as written or as a URL
 * parser serialised them), safe to print. A secret parameter's value becomes
 * `***` up to the next `&` that begins a parameter node-postgres knows, or to
 * the end: a `#`, `?`, `/`, `@`, `%`, `+`, space or other `&` inside it is
 * part of it. Whatever `#` is left then ends the URL as `#***` (no fragment
 * means anything to PostgreSQL or NATS). A parameter node-postgres does not
 * know keeps its name only (`name=***`); one whose name is not a word prints
 * as `***`.
 */
function redactQueryAndFragment(tail: string): string {
  let t = tail.replace(QUERY_SECRET_IN_URL, '$1***');
  const hash = t.indexOf('#');
  if (hash >= 0) t = `${t.slice(0, hash)}#***`;
  if (!t.startsWith('?')) return t;
  const end = hash >= 0 ? hash : t.length;
  const params = t
    .slice(1, end)
    .split('&')
    .map((param) => {
      const eq = param.indexOf('=');
      const name = eq >= 0 ? param.slice(0, eq) : param;
      if (QUERY_NAMES.has(name.toLowerCase())) return param;
      return name === '' ? '' : PRINTABLE_NAME.test(name) ? `${name}=***` : '***';
    });
  return `?${params.join('&')}${t.slice(end)}`;
}

/**
 * A connection string safe to print: its password (or NATS token) as `***`,
 * its query and fragment as `redactQueryAndFragment` leaves them
 * (`postgres://u@h/db?password=Qs3kr#3tValue` → `postgres://u@h/db?password=***`).
 */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    // postgres://u/ser:pw@host parses as host "u" and path "/ser:pw@host": an @ after the host is a
    // password's (parseDatabaseUrl refuses such a URL; this prints none of it either).
    if (u.username === '' && `${u.pathname}${u.search}${u.hash}`.includes('@')) return '<unparseable url>';
    if (u.password) u.password = '***';
    // nats://TOKEN@host: a NATS URL's user alone is a token.
    else if (u.username && TOKEN_SCHEMES.test(u.protocol.slice(0, -1))) u.username = '***';
    const tail = `${u.search}${u.hash}`;
    u.search = '';
    u.hash = '';
    return `${u.toString()}${redactQueryAndFragment(tail)}`;
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
    if (!parts) return u;
    // host:port, then whatever query or fragment follows (a ?token= there is a credential too).
    const cut = parts.bare.slice(parts.scheme.length + 3).search(/[?#]/);
    const at = cut < 0 ? parts.bare.length : parts.scheme.length + 3 + cut;
    const bare = `${parts.bare.slice(0, at)}${redactQueryAndFragment(parts.bare.slice(at))}`;
    if (parts.userinfo === '') return bare;
    const colon = parts.userinfo.indexOf(':');
    const masked = colon >= 0 ? `${parts.userinfo.slice(0, colon)}:***` : '***';
    return bare.replace('://', `://${masked}@`);
  });
}

/** The credentials inside configured URLs, for the log's secret filter (see `credentialsIn`). */
export function urlPasswords(urls: readonly string[]): string[] {
  return urls.flatMap(configuredUrlSecrets);
}
