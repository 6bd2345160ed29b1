import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { databaseUrl, freePort, natsUrl, uniqueName, waitFor } from '@ferry/testkit';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';

// The docs, executed (issue 16): the quick-start's shell lines run as written, in an empty
// folder, against the real PostgreSQL and NATS; its files are the doc's TypeScript blocks,
// written as they are; each `# → text` line under a command is an outcome the test asserts.
// Only what must differ on a shared CI machine is substituted: a database of the test's own
// (so the default schema "ferry" and the tables "orders"/"invoices" collide with nothing),
// a unique stream and subject prefix, a free HTTP port, and the checkout's path.

const ROOT = fileURLToPath(new URL('../../', import.meta.url)); // test/dist/ → repo root
const read = (doc: string) => readFileSync(join(ROOT, doc), 'utf8');

/** The docs whose TypeScript/JavaScript blocks must all be executed or be verbatim copies of executed ones. */
const DOCS = [
  'README.md',
  'docs/quick-start.md',
  'packages/core/README.md',
  'packages/publisher/README.md',
  'packages/inbox/README.md',
  'packages/idempotency/README.md',
  'apps/relay/README.md',
];

interface Block {
  lang: string;
  body: string;
}

function blocks(markdown: string): Block[] {
  return [...markdown.matchAll(/^```([\w-]*)\n([\s\S]*?)^```$/gm)].map((m) => ({ lang: m[1] ?? '', body: m[2] ?? '' }));
}

const isCode = (b: Block) => ['ts', 'typescript', 'js', 'javascript'].includes(b.lang);
/** A block that is a file of the user's app names it on its first line: `// publish.ts`. */
const fileName = (b: Block) => /^\/\/ ([\w-]+\.(?:ts|js|mjs))\n/.exec(b.body)?.[1];

const DOC_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/postgres';
const DOC_NATS_URL = 'nats://127.0.0.1:4222';
const DOC_CHECKOUT = '~/src/ferry';

const suffix = uniqueName('qs')
  .replace(/^qs_?/, '')
  .toLowerCase()
  .replace(/[^a-z0-9]/g, '');
const database = `ferry_docs_${suffix}`;
const stream = `ORDERS_${suffix.toUpperCase()}`;
const subjectPrefix = `orders_${suffix}`;
const dbUrl = (() => {
  const u = new URL(databaseUrl());
  u.pathname = `/${database}`;
  return u.toString();
})();

/** Stream and subject names made unique; everything else stays as the doc has it. */
const localise = (text: string) => text.replace(/\bORDERS\b/g, stream).replace(/\borders\.(?=placed\b|>)/g, `${subjectPrefix}.`);

let admin: pg.Client;
let work: string;
let passed = false;
const running: ChildProcess[] = [];

/** A shell as a user's: no npm_* variables or repo-local bins from an `npm test` parent. */
function userEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('npm_') && !k.startsWith('FERRY_')) env[k] = v;
  env.PATH = (process.env.PATH ?? '')
    .split(delimiter)
    .filter((p) => !(p.startsWith(ROOT) && p.includes('node_modules')))
    .join(delimiter);
  return { ...env, ...extra };
}

before(async () => {
  admin = new pg.Client({ connectionString: databaseUrl() });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${database}`);
  work = mkdtempSync(join(tmpdir(), 'ferry-quick-start-'));
});

after(async () => {
  for (const p of running) {
    if (p.exitCode === null && p.signalCode === null && p.pid !== undefined) {
      try {
        process.kill(-p.pid, 'SIGKILL');
      } catch {}
    }
  }
  await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`).catch(() => {});
  await admin.end();
  const nc = await connect({ servers: natsUrl() });
  const jsm = await jetstreamManager(nc);
  await jsm.streams.delete(stream).catch(() => {});
  await nc.close();
  if (passed) rmSync(work, { recursive: true, force: true });
  else console.error(`quick-start test: the app folder is kept for inspection: ${work}`);
});

interface Step {
  command: string;
  expect: string[];
}

/** The commands of a doc's `sh` blocks, each with the `# → …` outcomes written under it. */
function steps(markdown: string): Step[] {
  const out: Step[] = [];
  for (const b of blocks(markdown).filter((x) => x.lang === 'sh')) {
    for (const line of b.body.split('\n')) {
      const expected = /^# → (.+)$/.exec(line);
      if (expected) {
        const last = out.at(-1);
        assert.ok(last, `an outcome with no command before it: ${line}`);
        last.expect.push(localise(expected[1] ?? ''));
      } else if (line.trim() !== '' && !line.startsWith('#')) {
        assert.doesNotMatch(line, /\s#\s/, `a trailing comment would be run: ${line}`);
        out.push({ command: line.trim(), expect: [] });
      }
    }
  }
  return out;
}

interface Shell {
  cwd: string;
  env: Record<string, string>;
  files: Map<string, string>;
}

/** Runs to the end; asserts exit 0 and every stated outcome. */
function run(shell: Shell, command: string, expect: string[], timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-c', command], { cwd: shell.cwd, env: userEnv(shell.env), stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (b: Buffer) => {
      output += b.toString();
    });
    child.stderr.on('data', (b: Buffer) => {
      output += b.toString();
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      try {
        assert.equal(code, 0, `\`${command}\` exited ${code ?? signal}:\n${output.slice(-3000)}`);
        for (const e of expect) assert.ok(output.includes(e), `\`${command}\` did not print "${e}":\n${output.slice(-3000)}`);
        resolve(output);
      } catch (err) {
        reject(err);
      }
    });
  });
}

interface Background {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

/** Starts a long-running command (the relay, a consumer) and waits for its stated outcomes. */
async function start(shell: Shell, command: string, expect: string[]): Promise<Background> {
  // `npx` would stand between the signal and the relay (and outlive it): exec the same bin directly.
  const direct = command.replace(/^npx ferry /, 'node_modules/.bin/ferry ');
  const child = spawn('bash', ['-c', `exec ${direct}`], {
    cwd: shell.cwd,
    env: userEnv(shell.env),
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true, // its own process group, so a failed test can end it and anything it started
  });
  running.push(child);
  let output = '';
  child.stdout?.on('data', (b: Buffer) => {
    output += b.toString();
  });
  child.stderr?.on('data', (b: Buffer) => {
    output += b.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  for (const e of expect) {
    await waitFor(
      () => {
        if (child.exitCode !== null) throw new Error(`\`${command}\` exited ${child.exitCode}:\n${output.slice(-3000)}`);
        return output.includes(e);
      },
      { timeoutMs: 30_000, what: `\`${command}\` to print "${e}" (so far:\n${output.slice(-1500)})` },
    );
  }
  return { child, output: () => output, exited };
}

/** Runs a doc's shell steps as a user would, in order; returns the long-running processes it started. */
async function walk(doc: string, shell: Shell): Promise<Map<string, Background>> {
  const background = new Map<string, Background>();
  for (const { command: raw, expect } of steps(read(doc))) {
    let command = localise(raw);
    const mkdirCd = /^mkdir ([\w-]+) && cd \1$/.exec(command);
    const exported = /^export (FERRY_[A-Z_]+)=(\S+)$/.exec(command);
    if (mkdirCd) {
      shell.cwd = join(shell.cwd, mkdirCd[1] ?? '');
      mkdirSync(shell.cwd);
      // The doc's files, saved in the app folder as the doc says.
      for (const [name, text] of shell.files) writeFileSync(join(shell.cwd, name), text);
      continue;
    }
    if (exported) {
      const [, name = '', value = ''] = exported;
      const local = new Map([
        [DOC_DATABASE_URL, dbUrl],
        [DOC_NATS_URL, natsUrl()],
      ]);
      assert.ok(local.has(value), `${doc}: export ${name}=${value} is not a value the test knows how to localise`);
      shell.env[name] = local.get(value) ?? value;
      continue;
    }
    command = command.replaceAll(DOC_CHECKOUT, `'${ROOT}'`);
    if (command.startsWith('npm install')) command += ' --prefer-offline --no-audit --no-fund';
    const file = /^node ([\w-]+\.ts)$/.exec(command)?.[1];
    const longRunning =
      command.startsWith('npx ferry relay') || (file !== undefined && /inbox\.start\(\)/.test(shell.files.get(file) ?? ''));
    if (longRunning) background.set(raw, await start(shell, command, expect));
    else await run(shell, command, expect, command.startsWith('npm') ? 180_000 : 60_000);
  }
  return background;
}

/** The app's files: every code block of `doc` that names its file, with unique stream and subjects. */
function appFiles(doc: string): Map<string, string> {
  const files = new Map<string, string>();
  for (const b of blocks(read(doc)).filter(isCode)) {
    const name = fileName(b);
    if (name) files.set(name, localise(b.body));
  }
  return files;
}

test('docs - the quick-start, run as written: empty folder, install, migrate, publish, relay, inbox applies, status shows it published', async () => {
  const files = new Map([...appFiles('docs/quick-start.md'), ...appFiles('packages/inbox/README.md')]);
  assert.deepEqual([...files.keys()].sort(), ['consume.ts', 'invoicing.ts', 'publish.ts']);
  const shell: Shell = { cwd: work, env: { FERRY_HTTP_PORT: String(await freePort()) }, files };
  const started = await walk('docs/quick-start.md', shell);
  assert.deepEqual(
    [...started.keys()],
    [`npx ferry relay --ensure-stream ORDERS='orders.>'`, 'node consume.ts'],
    'the relay and the consumer keep running',
  );

  // The invoice is in the consumer's table: the effect, not only a log line.
  const db = new pg.Client({ connectionString: dbUrl });
  await db.connect();
  try {
    const invoices = await db.query('SELECT order_id, total_cents FROM invoices');
    assert.deepEqual(invoices.rows, [{ order_id: 'order-1', total_cents: 4999 }]);

    // The inbox README's consumer, in the same app: its own consumer name, so it applies the event again, once.
    const inboxReadme = await walk('packages/inbox/README.md', shell);
    const emails = await db.query(`SELECT data FROM ferry_boss.job WHERE name = 'send-invoice-email'`);
    assert.deepEqual(
      emails.rows.map((r) => r.data),
      [{ orderId: 'order-1' }],
      'the follow-up job committed with the invoice',
    );

    // A clean stop on SIGTERM, as the files promise.
    for (const p of [...inboxReadme.values(), ...[...started.values()].reverse()]) {
      p.child.kill('SIGTERM');
      assert.equal(await p.exited, 0, p.output().slice(-2000));
    }

    // "What Ferry created": every schema the table names exists, and the removal SQL removes them all.
    const quickStart = read('docs/quick-start.md');
    const table = quickStart.slice(quickStart.indexOf('## What Ferry created'));
    const named = [...table.matchAll(/^\| `(\w+)`/gm)].map((m) => m[1]);
    const { rows } = await db.query<{ nspname: string }>(`SELECT nspname FROM pg_namespace WHERE nspname = ANY($1) ORDER BY 1`, [named]);
    assert.deepEqual(
      rows.map((r) => r.nspname),
      [...named].sort(),
    );
    const sql = blocks(table).filter((b) => b.lang === 'sql');
    assert.equal(sql.length, 1);
    await db.query(sql[0]?.body ?? '');
    const left = await db.query(`SELECT nspname FROM pg_namespace WHERE nspname = ANY($1)`, [named]);
    assert.equal(left.rowCount, 0);
  } finally {
    await db.end();
  }
  passed = true;
});

test('docs - every TypeScript/JavaScript block of the READMEs and the quick-start is executed above or is a verbatim copy of one', () => {
  const executed = new Set([...appFiles('docs/quick-start.md').values(), ...appFiles('packages/inbox/README.md').values()]);
  // The idempotency samples are compiled example files, checked verbatim by idempotency-docs.test.ts.
  const examples = new URL('packages/idempotency/src/examples/', `file://${ROOT}`);
  let count = 0;
  for (const doc of DOCS) {
    for (const b of blocks(read(doc)).filter(isCode)) {
      count++;
      const body = localise(b.body);
      const compiledExample =
        doc === 'packages/idempotency/README.md' && readFileSync(new URL('express-endpoint.ts', examples), 'utf8').trim() === b.body.trim();
      assert.ok(executed.has(body) || compiledExample, `${doc}: a code block that no test runs:\n${b.body.slice(0, 300)}`);
    }
  }
  assert.ok(count >= 5, `${count} blocks`);
});
