// An inbox instance frozen (SIGSTOP) inside a message's transaction holds that key's row lock only
// until PostgreSQL ends its idle transaction (transactionIdleTimeoutMs); JetStream redelivers its
// messages after the ack wait, and the other instance applies them. Nothing is applied twice when
// the frozen one wakes: its session is gone, so its commit fails.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { quoteIdentifier } from '@ferry/core';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import type { InboxFreezeChildConfig } from './fixtures/inbox-freeze-child.js';
import { ferryEvent, publishEvents } from './inbox-support.js';

const CHILD = fileURLToPath(new URL('./fixtures/inbox-freeze-child.js', import.meta.url));
const ACK_WAIT_MS = 3000;
const IDLE_MS = 3000;
const FREEZE_MS = 20_000;
const KEYS = 20;

interface Line {
  kind: string;
  key?: string;
  version?: string;
  at: number;
  name: string;
}

let db: TestDatabase;
let stream: TestStream;
const children: Array<{ proc: ChildProcess; lines: Line[] }> = [];

before(async () => {
  db = await createTestDatabase({ prefix: 'inbox_freeze', migrate: ['inbox'] });
  stream = await createTestStream({ prefix: 'inboxfreeze' });
  await db.pool.query(
    `CREATE TABLE ${quoteIdentifier(db.schema)}.freeze_effects (seq bigserial PRIMARY KEY, key text NOT NULL, version bigint NOT NULL, instance text NOT NULL)`,
  );
});

after(async () => {
  for (const c of children) {
    if (c.proc.exitCode === null && c.proc.signalCode === null) {
      c.proc.kill('SIGCONT');
      c.proc.kill('SIGKILL');
    }
  }
  await stream?.close();
  await db?.pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(`${db.schema}_boss`)} CASCADE`).catch(() => {});
  await db?.close();
});

function child(name: string, extra: Partial<InboxFreezeChildConfig> = {}): { proc: ChildProcess; lines: Line[] } {
  const config: InboxFreezeChildConfig = {
    databaseUrl: db.url,
    natsUrl: stream.nc.getServer(),
    schema: db.schema,
    bossSchema: `${db.schema}_boss`,
    stream: stream.name,
    consumer: 'billing',
    ackWaitMs: ACK_WAIT_MS,
    transactionIdleTimeoutMs: IDLE_MS,
    name,
    ...extra,
  };
  const proc = spawn(process.execPath, [CHILD, JSON.stringify(config)], { stdio: ['ignore', 'pipe', 'pipe'] });
  const c = { proc, lines: [] as Line[] };
  let buf = '';
  proc.stdout?.on('data', (b: Buffer) => {
    buf += b.toString();
    let nl = buf.indexOf('\n');
    while (nl >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      try {
        c.lines.push(JSON.parse(line) as Line);
      } catch {}
      nl = buf.indexOf('\n');
    }
  });
  proc.stderr?.on('data', () => {});
  children.push(c);
  return c;
}

test('inbox freeze - one of two instances SIGSTOPped mid-handler for 20 s: its key waits at most the ack wait plus the idle timeout, the other keys not at all, nothing applied twice', async (t) => {
  const frozen = child('frozen', { hangAfterMs: 4000, hangMs: 1000 });
  const live = child('live');
  await waitFor(() => frozen.lines.some((l) => l.kind === 'started') && live.lines.some((l) => l.kind === 'started'), {
    timeoutMs: 30_000,
    what: 'both inbox instances started',
  });
  // Every 200 ms one new version of every key, for 30 s.
  const publishedAt = new Map<string, number>();
  let version = 0;
  let frozenAt: number | undefined;
  let hungKey: string | undefined;
  const until = Date.now() + 30_000;
  while (Date.now() < until) {
    version++;
    const events = Array.from({ length: KEYS }, (_, k) => ferryEvent(stream.prefix, { key: `k${k}`, version }));
    await publishEvents(stream.nc, events);
    const now = Date.now();
    for (const e of events) publishedAt.set(`${e.key}/${e.version}`, now);
    const hang = frozen.lines.find((l) => l.kind === 'in-handler');
    if (hang && frozenAt === undefined) {
      frozen.proc.kill('SIGSTOP');
      frozenAt = Date.now();
      hungKey = hang.key;
      setTimeout(() => frozen.proc.kill('SIGCONT'), FREEZE_MS).unref();
    }
    await sleep(200);
  }
  assert.ok(frozenAt !== undefined && hungKey !== undefined, 'the frozen instance entered its hanging handler');
  const last = version;
  // latest: every key ends at its last version, applied by someone.
  const s = quoteIdentifier(db.schema);
  const reports = () =>
    JSON.stringify(
      Object.fromEntries(
        ['applied', 'stale', 'failed', 'parked'].map((k) => [k, [...frozen.lines, ...live.lines].filter((l) => l.kind === k).length]),
      ),
    );
  await waitFor(
    async () => {
      const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${s}.inbox_versions WHERE version = $1`, [last]);
      return rows[0]?.n === KEYS;
    },
    { timeoutMs: 120_000, what: 'every key at its last version' },
  ).catch((err: Error) => {
    throw new Error(`${err.message}; inbox reports ${reports()}`, { cause: err });
  });
  await sleep(Math.max(0, frozenAt + FREEZE_MS + 3000 - Date.now())); // the frozen one woke and tried to commit

  const dup = await db.pool.query<{ key: string; version: string; n: number }>(
    `SELECT key, version::text, count(*)::int AS n FROM ${s}.freeze_effects GROUP BY 1, 2 HAVING count(*) > 1`,
  );
  // freeze_effects rows are written inside the message's transaction: a rolled-back attempt leaves none.
  assert.deepEqual(dup.rows, [], 'no (key, version) applied twice');

  // Waits: publish to applied, for versions published during the freeze.
  const applied = [...frozen.lines, ...live.lines].filter((l) => l.kind === 'applied');
  const waits = new Map<string, number>();
  for (const a of applied) {
    const p = publishedAt.get(`${a.key}/${a.version}`);
    // Published after the SIGSTOP: the batch stamped in the same millisecond as frozenAt went out before it, and
    // one of its messages may have committed in the frozen instance just before the stop and been reported on waking
    // (a clean-clone CI run saw three keys "wait" 20,009 ms, the freeze plus 9 ms: a report at waking of a batch
    // stamped no later than frozenAt).
    if (p === undefined || p <= frozenAt || p > frozenAt + FREEZE_MS) continue;
    waits.set(a.key as string, Math.max(waits.get(a.key as string) ?? 0, a.at - p));
  }
  const hungWait = waits.get(hungKey) ?? 0;
  const others = [...waits].filter(([k]) => k !== hungKey).map(([, w]) => w);
  const othersMax = Math.max(0, ...others);
  // Under the ack wait: a key applied sooner was not waiting for a redelivery of the frozen instance's message.
  // (A 1 s line failed in the clean-clone CI run with every other key under 2.2 s: load, not the freeze.)
  const calm = others.filter((w) => w < ACK_WAIT_MS).length;
  t.diagnostic(
    `frozen key ${hungKey}: longest wait ${hungWait} ms (bound ack wait ${ACK_WAIT_MS} + idle ${IDLE_MS} ms); other keys: longest ${othersMax} ms, ${calm} of ${others.length} under the ack wait`,
  );
  const bound = ACK_WAIT_MS + IDLE_MS + 2000;
  assert.ok(hungWait < bound, `the frozen key waited ${hungWait} ms`);
  assert.ok(othersMax < bound, `another key waited ${othersMax} ms`);
  // Keys with a transaction open in the frozen instance (it runs 8 at once) wait like the frozen key;
  // the rest are applied by the live instance as they come.
  assert.ok(calm >= others.length / 2, `only ${calm} of ${others.length} other keys were applied within the ack wait`);
  const woke = frozen.lines.filter((l) => l.at > frozenAt + FREEZE_MS && l.kind === 'applied' && l.key === hungKey);
  t.diagnostic(`after waking, the frozen instance applied ${woke.length} message(s) of ${hungKey}`);

  for (const c of children) c.proc.kill('SIGTERM');
});
