import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { LOG_LEVELS, parseDatabaseUrl } from './cli/flag-parsers.js';
import { createLogger } from './logger.js';
import { redactNatsUrls, redactUrl, secretsOf, textRedactor, urlPasswords } from './redact.js';

// Issue 42 item 5: `?password=Qs3kr#3tValue` printed as `?password=***#3tValue` in the relay's
// starting line. A generated matrix: every character a URL parser treats as a delimiter
// (# ? & / @ % +) and spaces, inside the user, the password, each secret query value and the
// fragment of PostgreSQL and NATS URLs, through every way a URL reaches the output: the CLI's
// redactor (the URL in a flag and in its FERRY_* variable), the relay's logger at every level
// (the starting line's fields and an error quoting the URL), and redactUrl/redactNatsUrls alone.
// A secret is three marker pieces joined by the character; no piece may appear in any form.

const CHARACTERS = ['#', '?', '&', '/', '@', '%', '%41', '%zz', '+', ' ', '  ', '#?&/@%+ '];
const QUERY_NAMES = ['password', 'sslpassword', 'pass', 'token', 'auth_token'];

interface Shape {
  what: string;
  url: string;
  /** The pieces of the secret: none may appear in the output. */
  pieces: string[];
  nats: boolean;
  /** Whether the URL in a text, with no secret registered, must be masked by pattern alone (no space in the query value). */
  byPattern: boolean;
}

function shapes(): Shape[] {
  const out: Shape[] = [];
  let n = 0;
  for (const c of CHARACTERS) {
    const piece = () => `Kq${(n++).toString(36)}xW`;
    const secret = () => {
      const pieces = [piece(), piece(), piece()];
      return { text: pieces.join(c), pieces };
    };
    const add = (what: string, make: (s: string) => string, nats = false, byPattern = false) => {
      const s = secret();
      out.push({ what: `${what}, ${JSON.stringify(c)}`, url: make(s.text), pieces: s.pieces, nats, byPattern: byPattern && !/\s/.test(c) });
    };
    add('postgres password', (s) => `postgres://user:${s}@127.0.0.1:5432/db`);
    add('postgres password, a query after', (s) => `postgres://user:${s}@127.0.0.1:5432/db?sslmode=disable`);
    add('postgres user and password', (s) => `postgres://us${c}er:${s}@127.0.0.1:5432/db`);
    for (const name of QUERY_NAMES) {
      add(`?${name}= last`, (s) => `postgres://user@127.0.0.1:5432/db?${name}=${s}`, false, true);
      add(`?${name}= between`, (s) => `postgres://user@127.0.0.1:5432/db?sslmode=disable&${name}=${s}&application_name=app`, false, true);
      add(`?${name}= then a fragment`, (s) => `postgres://user@127.0.0.1:5432/db?${name}=${s}#${piece()}${c}${piece()}`, false, true);
      add(`?${name}= holding a fragment`, (s) => `postgres://user@127.0.0.1:5432/db?application_name=a&${name}=Qs3kr#${s}`, false, true);
    }
    add('a fragment of a URL with a password', (s) => `postgres://user:pw@127.0.0.1:5432/db#${s}`);
    add('a fragment after ?password=', (s) => `postgres://u@127.0.0.1:5432/db?password=${piece()}#${s}`);
    add('NATS token', (s) => `nats://${s}@127.0.0.1:4222`, true);
    add('NATS password', (s) => `nats://user:${s}@127.0.0.1:4222`, true);
    add('NATS user and password', (s) => `nats://us${c}er:${s}@127.0.0.1:4222`, true);
    add('NATS password, second of a list', (s) => `nats://127.0.0.1:4222,tls://user:${s}@127.0.0.1:4223`, true);
    add('NATS ?token=', (s) => `nats://127.0.0.1:4222?token=${s}`, true, true);
  }
  return out;
}

/** The texts a URL reaches the output in: whole, in an error line, in JSON, parsed and re-serialised, percent-encoded. */
function textsOf(url: string): string[] {
  const texts = [url, `error: connect ${url} failed`, JSON.stringify({ url }), `'${url}'`, encodeURI(url)];
  for (const entry of url.split(',')) {
    try {
      texts.push(new URL(entry).toString());
    } catch {
      // what does not parse is printed by nobody but as the text it is
    }
  }
  return texts;
}

function leaks(output: string, pieces: string[]): string[] {
  return pieces.filter((p) => output.includes(p));
}

test('redact - every URL shape: the CLI masks each piece of the secret, from a flag and from a FERRY_* variable', () => {
  const failures: string[] = [];
  for (const shape of shapes()) {
    const flag = shape.nats ? '--nats-url' : '--database-url';
    const variable = shape.nats ? 'FERRY_NATS_URL' : 'FERRY_DATABASE_URL';
    for (const [source, redact] of [
      [flag, textRedactor(secretsOf(['node', 'ferry', 'status', flag, shape.url], {}))],
      [`${flag}=`, textRedactor(secretsOf(['node', 'ferry', 'status', `${flag}=${shape.url}`], {}))],
      [variable, textRedactor(secretsOf(['node', 'ferry', 'status'], { [variable]: shape.url }))],
    ] as const) {
      for (const text of textsOf(shape.url)) {
        const out = redact(text);
        const leaked = leaks(out, shape.pieces);
        if (leaked.length > 0) failures.push(`${shape.what} (${source}): ${JSON.stringify(text)} → ${JSON.stringify(out)}`);
      }
    }
  }
  assert.deepEqual(failures, [], `${failures.length} leaks:\n${failures.slice(0, 40).join('\n')}`);
});

test('redact - every URL shape: redactUrl and redactNatsUrls print no piece of the secret, with nothing registered', () => {
  const failures: string[] = [];
  // A NATS URL is split at its last @ (a token may hold / ? #): in nats://h:4222?token=a@b what follows
  // the last @ is the host by that rule, so only the registered secrets (the tests around) mask it.
  for (const shape of shapes().filter((s) => !(s.what.startsWith('NATS ?token=') && s.url.includes('@')))) {
    const printed = shape.nats ? redactNatsUrls(shape.url.split(',')).join(',') : redactUrl(shape.url);
    if (leaks(printed, shape.pieces).length > 0) failures.push(`${shape.what}: ${shape.url} → ${printed}`);
  }
  assert.deepEqual(failures, [], `${failures.length} leaks:\n${failures.slice(0, 40).join('\n')}`);
  // The shape of the issue: the whole value is masked, and the fragment with it.
  assert.equal(redactUrl('postgres://u@h/db?password=Qs3kr#3tValue'), 'postgres://u@h/db?password=***');
  assert.equal(
    redactUrl('postgres://u@h/db?sslmode=disable&password=a&b#c&application_name=x'),
    'postgres://u@h/db?sslmode=disable&password=***&application_name=x',
  );
  // A fragment alone means nothing to PostgreSQL or NATS, and a parameter node-postgres does not read keeps its name only.
  assert.equal(redactUrl('postgres://u@h/db?sslmode=disable&secretish=x#frag'), 'postgres://u@h/db?sslmode=disable&secretish=***#***');
  assert.deepEqual(redactNatsUrls(['nats://h:4222?token=a#b', 'nats://h:4223']), ['nats://h:4222?token=***', 'nats://h:4223']);
});

test('redact - every query shape without a space: a URL in a line of text is masked by pattern alone, nothing registered', () => {
  const redact = textRedactor([]);
  const failures: string[] = [];
  for (const shape of shapes().filter((s) => s.byPattern)) {
    for (const text of [shape.url, `error: connect ${shape.url} failed`, JSON.stringify({ url: shape.url })]) {
      const out = redact(text);
      if (leaks(out, shape.pieces).length > 0) failures.push(`${shape.what}: ${text} → ${out}`);
    }
  }
  assert.deepEqual(failures, [], `${failures.length} leaks:\n${failures.slice(0, 40).join('\n')}`);
  // And it stops where the next known parameter begins, so those stay readable.
  assert.equal(redact('at postgres://h/db?password=a#b&c&sslmode=disable ok'), 'at postgres://h/db?password=***&sslmode=disable ok');
});

test('redact - every URL shape: the relay’s logger at every level writes no piece of the secret in its starting line or an error', () => {
  const failures: string[] = [];
  const methods = LOG_LEVELS.filter((l) => l !== 'silent');
  for (const shape of shapes()) {
    const written: string[] = [];
    const sink = new Writable({
      write(chunk, _encoding, done) {
        written.push(String(chunk));
        done();
      },
    });
    for (const level of LOG_LEVELS) {
      // As runRelay builds it: the secrets of the configured URLs (urlPasswords), then the starting line's fields.
      const logger = createLogger(level, urlPasswords(shape.url.split(',')), sink) as unknown as Record<
        string,
        (obj: object, msg: string) => void
      >;
      const fields = shape.nats
        ? { event: 'starting', nats: redactNatsUrls(shape.url.split(',')) }
        : { event: 'starting', database: redactUrl(shape.url) };
      for (const method of methods) {
        logger[method]?.(fields, 'ferry relay starting');
        logger[method]?.({ err: new Error(`connect ${shape.url} failed`), url: shape.url }, `could not connect to ${shape.url}`);
      }
    }
    const out = written.join('');
    if (written.length === 0) failures.push(`${shape.what}: the logger wrote nothing`);
    const leaked = leaks(out, shape.pieces);
    if (leaked.length > 0) {
      const line = out.split('\n').find((l) => leaked.some((p) => l.includes(p))) ?? '';
      failures.push(`${shape.what}: ${line.slice(0, 300)}`);
    }
  }
  assert.deepEqual(failures, [], `${failures.length} leaks:\n${failures.slice(0, 40).join('\n')}`);
});

test('redact - a PostgreSQL URL with an @ after its host and no user is refused, never echoed, wherever the parser put the rest', () => {
  // postgres://u?ser:pw@host parses as host "u" and the query "ser:pw@host": the password would travel as a query.
  for (const url of [
    'postgres://u?ser:Kq9Secret@127.0.0.1:5432/db',
    'postgres://u/ser:Kq9Secret@h/db',
    'postgres://u#ser:Kq9Secret@h/db',
  ]) {
    assert.throws(
      () => parseDatabaseUrl(url),
      (err: Error) => /has an @ after its host and no user \(value hidden/.test(err.message) && !err.message.includes('Kq9Secret'),
      url,
    );
    assert.equal(redactUrl(url), '<unparseable url>', url);
  }
  // A user given in the query with an encoded @ is a URL like any other.
  assert.equal(parseDatabaseUrl('postgres://h/db?user=a%40b'), 'postgres://h/db?user=a%40b');
});
