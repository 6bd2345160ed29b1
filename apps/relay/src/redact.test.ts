import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { main } from './cli.js';
import { credentialsIn, redactNatsUrls, redactUrl, secretsOf, splitUserinfo, textRedactor, urlPasswords } from './redact.js';

const SECRET = 'S3cretPw-9d1e';

test('redact - the credential of any URL form is masked in text, parseable or not', () => {
  const redact = textRedactor([]);
  const forms = [
    `nats://${SECRET}@host:4222`, // a NATS token as the URL's user
    `postgres://u:${SECRET}@127.0.0.1:99999/x`, // a port no URL parser accepts
    `natss://bob:${SECRET}@nats.example:4222`, // a scheme Ferry refuses
    `tls://bob:${SECRET}@h:4222,nats://${SECRET}@h2:4222`,
    `postgres://u:p@${SECRET}@host/db`, // an unencoded @ in the password
    `error: option '--database-url <url>' argument 'postgres://u:${SECRET}@h:99999/x' is invalid.`,
    `{"nats":["wss://${SECRET}@h:443"]}`,
  ];
  for (const text of forms) assert.ok(!redact(text).includes(SECRET), `${text} → ${redact(text)}`);
  assert.equal(redact(`postgres://u:${SECRET}@127.0.0.1:99999/x`), 'postgres://u:***@127.0.0.1:99999/x');
  assert.equal(redact(`nats://${SECRET}@host:4222`), 'nats://***@host:4222');
  // A PostgreSQL user alone is no secret and stays readable.
  assert.equal(redact('postgres://postgres@127.0.0.1:5432/test'), 'postgres://postgres@127.0.0.1:5432/test');
});

test('redact - secrets from flags, FERRY_* variables, URLs and a credentials file are masked wherever they appear', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ferry-redact-'));
  try {
    const creds = join(dir, 'u.creds');
    const seed = `SUA${'B'.repeat(55)}`;
    writeFileSync(creds, `-----BEGIN USER NKEY SEED-----\n${seed}\n------END USER NKEY SEED------\n`);
    const secrets = secretsOf(
      [
        'node',
        'ferry',
        'doctor',
        '--nats-token',
        'flag-token-1',
        '--nats-password=flag-pass-2',
        '--nats-creds',
        creds,
        '--nats-url',
        'nats://url-tok-3@h',
      ],
      { FERRY_NATS_NKEY_SEED: 'env-seed-4', FERRY_DATABASE_URL: 'postgres://u:env-pw-5@h:99999/x', FERRY_NATS_URL: 'natss://b:env-pw-6@h' },
    );
    const redact = textRedactor(secrets);
    for (const s of ['flag-token-1', 'flag-pass-2', 'url-tok-3', 'env-seed-4', 'env-pw-5', 'env-pw-6', seed]) {
      assert.equal(redact(`an error mentioning ${s} and ${encodeURIComponent(s)}`), 'an error mentioning *** and ***', s);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('redact - the starting line and doctor print a NATS token URL as nats://***@host', () => {
  assert.deepEqual(redactNatsUrls([`nats://${SECRET}@host:4222`, `nats://u:${SECRET}@h:1`, 'nats://h:2']), [
    'nats://***@host:4222',
    'nats://u:***@h:1',
    'nats://h:2',
  ]);
  assert.deepEqual(urlPasswords([`nats://${SECRET}@host:4222`]), [SECRET]);
  assert.equal(redactUrl(`postgres://u:${SECRET}@h:5432/db`), 'postgres://u:***@h:5432/db');
});

test('redact - the CLI echoes no credential of a malformed URL, in a flag or a FERRY_* variable', async () => {
  const cases: Array<[string[], Record<string, string>, RegExp]> = [
    [['status', '--database-url', `postgres://u:${SECRET}@127.0.0.1:99999/x`], {}, /--database-url/],
    [['status'], { FERRY_DATABASE_URL: `postgres://u:${SECRET}@127.0.0.1:99999/x` }, /FERRY_DATABASE_URL is not a valid URL/],
    [['doctor', '--database-url', 'postgres://h/db', '--nats-url', `natss://bob:${SECRET}@h:4222`], {}, /--nats-url/],
    [['doctor', '--database-url', 'postgres://h/db'], { FERRY_NATS_URL: `natss://bob:${SECRET}@h:4222` }, /--nats-url/],
  ];
  for (const [args, env, expected] of cases) {
    const lines: string[] = [];
    const saved = { ...process.env };
    Object.assign(process.env, env); // commander reads FERRY_* from process.env
    try {
      const code = await main(['node', 'ferry', ...args], {
        out: (l) => lines.push(l),
        err: (l) => lines.push(l),
        env: { ...process.env },
      });
      assert.equal(code, 2, lines.join('\n'));
    } finally {
      for (const k of Object.keys(env)) {
        if (saved[k] === undefined) delete process.env[k];
        else process.env[k] = saved[k];
      }
    }
    const out = lines.join('\n');
    assert.match(out, expected, out);
    assert.ok(!out.includes(SECRET), `${args.join(' ')}: ${out}`);
  }
});

/** Every shape of issue 32 item 5 that once reached the output whole: reserved characters, a bad port, a query password. */
const SHAPES: Array<[string, (secret: string) => string]> = [
  ['a / in the password', (s) => `postgres://u:${s}/x@127.0.0.1:5432/test`],
  ['a # in the password', (s) => `postgres://u:${s}#x@127.0.0.1:5432/test`],
  ['a ? in the password', (s) => `postgres://u:${s}?x@127.0.0.1:5432/test`],
  ['a , in the password', (s) => `postgres://u:${s},x@127.0.0.1:99999/test`],
  ['a space in the password', (s) => `postgres://u:${s} x@127.0.0.1:99999/test`],
  ["a ' in the password", (s) => `postgres://u:${s}'x@127.0.0.1:99999/test`],
  ['all of them', (s) => `postgres://u:p/a#s?s,x ${s}@127.0.0.1:5432/test`],
  ['digits, then a /', (s) => `postgres://u:123/${s}@127.0.0.1:5432/test`],
  ['a bad port', (s) => `postgres://u:${s}@127.0.0.1:5x/test`],
  ['a port out of range', (s) => `postgres://u:${s}@127.0.0.1:99999/test`],
  ['?password= in a URL that does not parse', (s) => `postgres://127.0.0.1:99999/test?user=u&password=${s}`],
];

async function run(args: string[], env: Record<string, string>): Promise<{ code: number; out: string }> {
  const lines: string[] = [];
  const saved = { ...process.env };
  Object.assign(process.env, env); // commander reads FERRY_* from process.env
  try {
    const code = await main(['node', 'ferry', ...args], { out: (l) => lines.push(l), err: (l) => lines.push(l), env: { ...process.env } });
    return { code, out: lines.join('\n') };
  } finally {
    for (const k of Object.keys(env)) {
      if (saved[k] === undefined) delete process.env[k];
      else process.env[k] = saved[k];
    }
  }
}

test('redact - a database URL that does not parse is refused with exit 2 and never echoed, from the flag or FERRY_DATABASE_URL', async () => {
  for (const [what, shape] of SHAPES) {
    const url = shape(SECRET);
    for (const [args, env, source] of [
      [['status', '--database-url', url], {}, '--database-url'],
      [['status', `--database-url=${url}`, '--json'], {}, '--database-url'],
      [['doctor', '--json'], { FERRY_DATABASE_URL: url }, 'FERRY_DATABASE_URL'],
    ] as Array<[string[], Record<string, string>, string]>) {
      const r = await run(args, env);
      assert.equal(r.code, 2, `${what}: ${r.out}`);
      assert.match(
        r.out,
        new RegExp(`^ferry: ${source} (is not a valid URL|has an @ after its host).*value hidden.*percent-encode`, 'm'),
        what,
      );
      assert.ok(!r.out.includes(SECRET) && !r.out.includes(url), `${what}: ${r.out}`);
    }
  }
});

test('redact - the secrets of every shape are found by hand, whether a URL parser accepts the URL or not', () => {
  for (const [what, shape] of SHAPES) {
    const url = shape(SECRET);
    const redact = textRedactor(secretsOf(['node', 'ferry', 'status', '--database-url', url], {}));
    assert.ok(!redact(`pg said: ${url} and ${SECRET}`).includes(SECRET), what);
    const fromEnv = textRedactor(secretsOf(['node', 'ferry', 'status'], { FERRY_DATABASE_URL: url }));
    assert.ok(!fromEnv(`pg said: ${url} and ${SECRET}`).includes(SECRET), `${what} (FERRY_DATABASE_URL)`);
  }
  // A query password of a URL that parses, and a percent-encoded one.
  assert.deepEqual(credentialsIn(`postgres://h/db?user=u&password=${SECRET}&sslmode=disable`), [SECRET]);
  assert.deepEqual(credentialsIn('postgres://u:p%2Fw%23d@h/db'), ['p%2Fw%23d', 'p/w#d']);
  assert.equal(redactUrl(`postgres://h/db?password=${SECRET}&sslpassword=${SECRET}`), 'postgres://h/db?password=***&sslpassword=***');
  assert.equal(
    textRedactor([])(`connecting to postgres://h/db?sslmode=disable&password=${SECRET}`),
    'connecting to postgres://h/db?sslmode=disable&password=***',
  );
});

test('redact - a NATS token or password holding /, ?, # or @ is split at the last @ and masked whole', () => {
  for (const token of [`to/${SECRET}`, `${SECRET}?x`, `${SECRET}#x`, `${SECRET}@x`, `a/b?c#${SECRET}`]) {
    const url = `nats://${token}@127.0.0.1:4222`;
    assert.deepEqual(splitUserinfo(url), { scheme: 'nats', userinfo: token, bare: 'nats://127.0.0.1:4222' });
    assert.deepEqual(redactNatsUrls([url]), ['nats://***@127.0.0.1:4222'], token);
    assert.deepEqual(redactNatsUrls([`tls://bob:${token}@h:4222`]), ['tls://bob:***@h:4222'], token);
    const redact = textRedactor(secretsOf(['node', 'ferry', 'doctor', '--nats-url', `nats://h:1,${url}`], {}));
    assert.ok(!redact(`NATS at ${url} and ${token}`).includes(SECRET), token);
    const fromEnv = textRedactor(secretsOf(['node', 'ferry', 'doctor'], { FERRY_NATS_URL: url }));
    assert.ok(!fromEnv(`NATS at ${url}`).includes(SECRET), `${token} (FERRY_NATS_URL)`);
  }
});

test('redact - a credential on the command line is warned about once, on stderr, by flag and variable, never by value', async () => {
  const err: string[] = [];
  const out: string[] = [];
  const argv = ['node', 'ferry', 'status', '--database-url', `postgres://u:${SECRET}@127.0.0.1:99999/x`, `--nats-password=${SECRET}`];
  await main(argv, { out: (l) => out.push(l), err: (l) => err.push(l), env: {} });
  const warnings = err.filter((l) => l.startsWith('ferry: warning:'));
  assert.equal(warnings.length, 1, err.join('\n'));
  assert.match(
    warnings[0] ?? '',
    /--nats-password, --database-url on the command line: .*ps, \/proc\/<pid>\/cmdline.*FERRY_NATS_PASSWORD, FERRY_DATABASE_URL/,
  );
  assert.ok(![...err, ...out].some((l) => l.includes(SECRET)));
  // The same credentials in variables, or a URL without one on the command line: no warning.
  const quiet: string[] = [];
  await main(['node', 'ferry', 'status', '--database-url', 'postgres://u@127.0.0.1:99999/x'], {
    out: () => {},
    err: (l) => quiet.push(l),
    env: { FERRY_NATS_PASSWORD: SECRET },
  });
  assert.deepEqual(
    quiet.filter((l) => l.includes('warning')),
    [],
  );
});
