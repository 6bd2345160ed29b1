import assert from 'node:assert/strict';
import { test } from 'node:test';
import { main } from '@ferry/relay';
import { freePort } from '@ferry/testkit';

// What a new user reads when something is off (issue 16, item 9): one line, the right words.

async function ferry(...args: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(['node', 'ferry', ...args], { out: (l) => out.push(l), err: (l) => err.push(l), env: {} });
  return { code, out: out.join('\n'), err: err.join('\n') };
}

test('cli - a group command with no subcommand prints its help and exits 2, like ferry alone; --help exits 0', async () => {
  for (const group of [['dlq'], ['inbox'], ['inbox', 'parked']]) {
    const r = await ferry(...group);
    assert.equal(r.code, 2, group.join(' '));
    assert.match(`${r.out}\n${r.err}`, new RegExp(`Usage: ferry ${group.join(' ')} \\[options\\] \\[command\\]`));
  }
  assert.equal((await ferry('dlq', '--help')).code, 0);
  assert.equal((await ferry()).code, 2);
});

test('cli - a refused connection says it was PostgreSQL, where, and which setting to check', async () => {
  const port = await freePort();
  const r = await ferry('status', '--database-url', `postgres://ops@127.0.0.1:${port}/app`);
  assert.equal(r.code, 1);
  assert.equal(
    r.err,
    `ferry: PostgreSQL at 127.0.0.1:${port} is unreachable (ECONNREFUSED): is it running, and are --database-url / FERRY_DATABASE_URL right?`,
  );
});

test('cli - a value that is not a PostgreSQL URL reads as one line that names the flag and hides the value', async () => {
  const r = await ferry('status', '--database-url', 'notaurl');
  assert.equal(r.code, 2);
  assert.equal(
    r.err,
    'ferry: --database-url is not a PostgreSQL URL (value hidden: it may hold a password): it starts with postgres:// or postgresql://, e.g. postgres://user@host:5432/database',
  );
});
