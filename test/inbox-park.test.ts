import assert from 'node:assert/strict';
import { after, afterEach, describe, test } from 'node:test';
import { type InboxReport, listParked } from '@ferry/inbox';
import { waitFor } from '@ferry/testkit';
import { PgBoss } from 'pg-boss';
import { EFFECT_SQL, ferryEvent, type InboxFixture, inboxFixture, publishEvents, publishRaw } from './inbox-support.js';

const fixtures: InboxFixture[] = [];
const bosses: PgBoss[] = [];
// Each test's servers and pools go when it ends: the shared PostgreSQL has a connection limit.
async function release(): Promise<void> {
  for (const b of bosses.splice(0)) await b.stop({ graceful: false }).catch(() => {});
  for (const f of fixtures.splice(0)) await f.close();
}
afterEach(release);
after(release);

async function fixture(): Promise<InboxFixture> {
  const f = await inboxFixture();
  fixtures.push(f);
  return f;
}

/** A pg-boss of the test's own on the fixture's pg-boss schema (installed by the inbox's start). */
async function bossFor(f: InboxFixture): Promise<PgBoss> {
  const boss = new PgBoss({ connectionString: f.db.url, schema: f.bossSchema, supervise: false, schedule: false, max: 2 });
  boss.on('error', () => {});
  await boss.start();
  bosses.push(boss);
  return boss;
}

const parkedReports = (f: InboxFixture) => f.reports.filter((r): r is Extract<InboxReport, { kind: 'parked' }> => r.kind === 'parked');

describe('inbox parking', () => {
  test('inbox - a failing handler is nak-ed with backoff, parked after maxDeliver, and applied when retried from the park', async () => {
    const f = await fixture();
    let failing = true;
    const attempts: number[] = [];
    const at: number[] = [];
    const inbox = f.inbox({
      mode: 'latest',
      maxDeliver: 3,
      backoffMs: [40, 80],
      handlers: {
        Set: async (event, { tx, attempt }) => {
          attempts.push(attempt);
          at.push(performance.now());
          await tx.query(EFFECT_SQL(f.s).effect, [event.key, event.version.toString()]);
          if (failing) throw new Error('downstream unavailable');
        },
      },
    });
    await inbox.start();
    await publishEvents(f.stream.nc, [ferryEvent(f.stream.prefix, { key: 'a', version: 1 })]);
    await waitFor(() => inbox.counts().parked === 1, { what: 'the event parked' });
    assert.deepEqual(attempts, [1, 2, 3]);
    // Nak delays follow backoffMs with jitter in [base/2, base]: at least 20 ms, then 40 ms.
    assert.ok((at[1] ?? 0) - (at[0] ?? 0) >= 19, `first retry after ${(at[1] ?? 0) - (at[0] ?? 0)} ms`);
    assert.ok((at[2] ?? 0) - (at[1] ?? 0) >= 39, `second retry after ${(at[2] ?? 0) - (at[1] ?? 0)} ms`);
    assert.deepEqual(await f.effects(), [], 'every failed attempt was rolled back');
    const failed = f.reports.filter((r) => r.kind === 'failed');
    assert.deepEqual(
      failed.map((r) => r.kind === 'failed' && r.willRetry),
      [true, true, false],
    );
    const [parked] = parkedReports(f);
    assert.equal(parked?.reason, 'handler-failed');
    assert.match(parked?.error ?? '', /downstream unavailable/);
    const boss = await bossFor(f);
    const listed = await listParked({ boss, consumer: 'billing' });
    assert.equal(listed.length, 1);
    assert.equal(listed[0]?.key, 'a');
    assert.equal(listed[0]?.reason, 'handler-failed');
    failing = false;
    await waitFor(() => f.reports.some((r) => r.kind === 'applied' && r.fromPark), { what: 'applied from the park', timeoutMs: 15_000 });
    assert.deepEqual(await f.effects(), [{ key: 'a', version: '1' }]);
    assert.equal((await listParked({ boss, consumer: 'billing' })).length, 0);
  });

  test('inbox - in latest mode a parked event overtaken by a newer version is completed from the park as stale', async () => {
    const f = await fixture();
    const inbox = f.inbox({
      mode: 'latest',
      maxDeliver: 1,
      handlers: {
        Set: async (event, { tx }) => {
          if (event.version === 1n) throw new Error('v1 cannot apply');
          await tx.query(EFFECT_SQL(f.s).effect, [event.key, event.version.toString()]);
        },
      },
    });
    await inbox.start();
    await publishEvents(f.stream.nc, [ferryEvent(f.stream.prefix, { key: 'a', version: 1 })]);
    await waitFor(() => inbox.counts().parked === 1, { what: 'a/1 parked' });
    await publishEvents(f.stream.nc, [ferryEvent(f.stream.prefix, { key: 'a', version: 2 })]);
    await waitFor(() => inbox.counts().applied === 1, { what: 'a/2 applied past the parked a/1' });
    const boss = await bossFor(f);
    await waitFor(async () => (await listParked({ boss, consumer: 'billing' })).length === 0, {
      what: 'a/1 completed from the park',
      timeoutMs: 15_000,
    });
    // The job leaves the park in the worker's transaction; the report follows its COMMIT.
    await waitFor(() => f.reports.some((r) => r.kind === 'stale' && r.version === 1n && r.recorded === 2n), {
      what: 'a/1 reported stale from the park',
      timeoutMs: 5_000,
    });
    assert.deepEqual(await f.effects(), [{ key: 'a', version: '2' }]);
  });

  test('inbox - in sequential mode later events of a parked key park behind it, other keys go on, and the key applies in order once unblocked', async () => {
    const f = await fixture();
    let failing = true;
    const inbox = f.inbox({
      mode: 'sequential',
      maxDeliver: 2,
      backoffMs: [20],
      handlers: {
        Set: async (event, { tx }) => {
          if (failing && event.key === 'a' && event.version === 1n) throw new Error('cannot apply a/1 yet');
          await tx.query(EFFECT_SQL(f.s).effect, [event.key, event.version.toString()]);
        },
      },
    });
    await inbox.start();
    const p = f.stream.prefix;
    await publishEvents(f.stream.nc, [
      ferryEvent(p, { key: 'a', version: 1 }),
      ferryEvent(p, { key: 'a', version: 2 }),
      ferryEvent(p, { key: 'b', version: 1 }),
      ferryEvent(p, { key: 'a', version: 3 }),
      ferryEvent(p, { key: 'b', version: 2 }),
    ]);
    await waitFor(() => inbox.counts().parked === 3 && inbox.counts().applied === 2, { what: 'a parked, b applied' });
    assert.deepEqual(
      parkedReports(f).map((r) => r.reason),
      ['handler-failed', 'behind-parked', 'behind-parked'],
    );
    assert.deepEqual(await f.effects(), [
      { key: 'b', version: '1' },
      { key: 'b', version: '2' },
    ]);
    const { rows } = await f.db.pool.query(`SELECT parked FROM ${f.s}.inbox_versions WHERE consumer = 'billing' AND key = 'a'`);
    assert.equal(rows[0]?.parked, 3);
    failing = false;
    await waitFor(async () => (await f.effects()).length === 5, { what: 'key a applied from the park', timeoutMs: 20_000 });
    const order = await f.db.pool.query<{ version: string }>(
      `SELECT version::text FROM ${f.s}.effects WHERE key = 'a' ORDER BY applied_at`,
    );
    assert.deepEqual(
      order.rows.map((r) => r.version),
      ['1', '2', '3'],
    );
    const after = await f.db.pool.query(`SELECT version::text, parked FROM ${f.s}.inbox_versions WHERE consumer = 'billing' AND key = 'a'`);
    assert.deepEqual(after.rows[0], { version: '3', parked: 0 });
    // With the key unblocked, a new event applies straight from the stream.
    await publishEvents(f.stream.nc, [ferryEvent(p, { key: 'a', version: 4 })]);
    await waitFor(async () => (await f.effects()).length === 6, { what: 'a/4 applied' });
  });

  describe('poison input is parked with its reason and never blocks other keys', () => {
    let f: InboxFixture;
    let inbox: ReturnType<InboxFixture['inbox']>;
    let n = 0;
    const base: Record<string, string> = {
      'ce-specversion': '1.0',
      'ce-id': 'a6a0e0a4-6a38-4d5f-8a43-9b0c4f9e2f11',
      'ce-source': 'test',
      'ce-type': 'Set',
      'ce-partitionkey': 'p1',
      'ce-sequence': '00000000000000000001',
      'Content-Type': 'application/json',
    };

    after(() => f?.close());

    /** Publishes the poison message, then a good event on another key; both must settle, the good one applied. */
    async function poison(headers: Record<string, string>, body: string): Promise<Extract<InboxReport, { kind: 'parked' }>> {
      // One fixture for the five cases (not closed between them).
      f ??= await inboxFixture();
      if (!inbox) {
        inbox = f.inbox({
          mode: 'latest',
          handlers: {
            Set: async (event, { tx }) => {
              await tx.query(EFFECT_SQL(f.s).effect, [event.key, event.version.toString()]);
            },
          },
        });
        await inbox.start();
      }
      const parkedBefore = inbox.counts().parked;
      const appliedBefore = inbox.counts().applied;
      await publishRaw(f.stream.nc, `${f.stream.prefix}.raw`, headers, Buffer.from(body));
      const good = `good-${++n}`;
      await publishEvents(f.stream.nc, [ferryEvent(f.stream.prefix, { key: good, version: 1 })]);
      await waitFor(() => inbox.counts().parked === parkedBefore + 1 && inbox.counts().applied === appliedBefore + 1, {
        what: 'the poison parked and the good event applied',
      });
      assert.ok((await f.effects()).some((e) => e.key === good));
      assert.equal(inbox.state, 'running');
      const report = parkedReports(f).at(-1);
      assert.ok(report);
      return report;
    }

    test('inbox - a message without ce-* headers is parked as undecodable-headers', async () => {
      const r = await poison({}, '{}');
      assert.equal(r.reason, 'undecodable-headers');
      assert.equal(r.key, undefined);
      assert.match(r.error, /ce-specversion/);
    });

    test('inbox - a message without ce-partitionkey is parked as undecodable-headers', async () => {
      const { 'ce-partitionkey': _k, ...noKey } = base;
      const r = await poison(noKey, '{}');
      assert.equal(r.reason, 'undecodable-headers');
      assert.match(r.error, /ce-partitionkey/);
    });

    test('inbox - a non-numeric ce-sequence is parked as undecodable-headers', async () => {
      const r = await poison({ ...base, 'ce-sequence': 'seven', 'ce-partitionkey': 'p3' }, '{}');
      assert.equal(r.reason, 'undecodable-headers');
      assert.match(r.error, /ce-sequence.*"seven"/);
    });

    test('inbox - a JSON content type with a body that is not JSON is parked as undecodable-body, message kept as it came', async () => {
      const r = await poison({ ...base, 'ce-partitionkey': 'p4' }, '{not json');
      assert.equal(r.reason, 'undecodable-body');
      assert.equal(r.key, 'p4');
      assert.match(r.error, /not JSON/);
      const boss = await bossFor(f);
      const [job] = await boss.findJobs(inbox.parkQueue, { key: 'p4' });
      assert.ok(job);
      assert.equal(Buffer.from((job.data as { body: string }).body, 'base64').toString(), '{not json');
      const listed = await listParked({ boss, consumer: 'billing' });
      assert.ok(listed.some((p) => p.key === 'p4' && p.reason === 'undecodable-body'));
    });

    test('inbox - a type with no handler is parked as unknown-type', async () => {
      const r = await poison({ ...base, 'ce-partitionkey': 'p5', 'ce-type': 'Unheard' }, '{}');
      assert.equal(r.reason, 'unknown-type');
      assert.equal(r.key, 'p5');
      assert.match(r.error, /no handler for event type "Unheard"/);
    });
  });

  test('inbox - a job sent through ctx.boss exists if and only if the handler committed', async () => {
    const f = await fixture();
    const inbox = f.inbox({
      mode: 'latest',
      maxDeliver: 2,
      backoffMs: [20],
      handlers: {
        Set: async (event, { tx, boss }) => {
          await tx.query(EFFECT_SQL(f.s).effect, [event.key, event.version.toString()]);
          await boss.send('emails', { key: event.key }, { singletonKey: `${event.key}-${event.version}` });
          if (event.key === 'doomed') throw new Error('fails after enqueueing');
        },
      },
    });
    await inbox.start();
    const boss = await bossFor(f);
    await boss.createQueue('emails');
    await publishEvents(f.stream.nc, [
      ferryEvent(f.stream.prefix, { key: 'doomed', version: 1 }),
      ferryEvent(f.stream.prefix, { key: 'fine', version: 1 }),
    ]);
    await waitFor(() => inbox.counts().applied === 1 && inbox.counts().parked === 1, { what: 'fine applied, doomed parked' });
    const jobs = await boss.findJobs('emails');
    assert.deepEqual(
      jobs.map((j) => (j.data as { key: string }).key),
      ['fine'],
      'the failed handler’s job rolled back with it',
    );
  });
});
