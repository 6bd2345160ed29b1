// Issue 13, inbox items: events named like Object.prototype members reach no
// handler, an onEvent hook that throws changes nothing, and in `sequential` mode
// one key's early versions do not hold the consumer's ack-pending slots.
import assert from 'node:assert/strict';
import { after, afterEach, describe, test } from 'node:test';
import type { InboxReport, Logger } from '@ferry/inbox';
import { waitFor } from '@ferry/testkit';
import { EFFECT_SQL, ferryEvent, type InboxFixture, inboxFixture, publishEvents } from './inbox-support.js';

const fixtures: InboxFixture[] = [];
async function release(): Promise<void> {
  for (const f of fixtures.splice(0)) await f.close();
}
afterEach(release);
after(release);

async function fixture(): Promise<InboxFixture> {
  const f = await inboxFixture();
  fixtures.push(f);
  return f;
}

/** A logger that keeps what it is given. */
function recordingLogger(): Logger & { lines: Array<{ level: string; obj: object; msg: string | undefined }> } {
  const lines: Array<{ level: string; obj: object; msg: string | undefined }> = [];
  const at = (level: string) => (obj: object, msg?: string) => {
    lines.push({ level, obj, msg });
  };
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

const PROTOTYPE_TYPES = ['constructor', 'toString', 'hasOwnProperty', 'valueOf', '__proto__', 'isPrototypeOf', 'toLocaleString'];

describe('hostile events at the inbox', () => {
  for (const mode of ['latest', 'sequential', 'dedupe'] as const) {
    test(`inbox - ${mode}: event types named like Object.prototype members are parked as unknown-type, never applied`, async () => {
      const f = await fixture();
      const ran: string[] = [];
      const inbox = f.inbox({
        mode,
        maxDeliver: 2,
        handlers: {
          Set: async (event, { tx }) => {
            ran.push(event.type);
            await tx.query(EFFECT_SQL(f.s).effect, [event.key, event.version.toString()]);
          },
        },
      });
      await inbox.start();
      await publishEvents(
        f.stream.nc,
        PROTOTYPE_TYPES.map((type, i) => ferryEvent(f.stream.prefix, { key: `k${i}`, version: 1, type })),
      );
      await waitFor(() => inbox.counts().parked === PROTOTYPE_TYPES.length, {
        what: 'every prototype-named type parked',
        timeoutMs: 15_000,
      });
      const parked = f.reports.filter((r): r is Extract<InboxReport, { kind: 'parked' }> => r.kind === 'parked');
      assert.deepEqual(
        parked.map((r) => r.reason),
        PROTOTYPE_TYPES.map(() => 'unknown-type'),
      );
      assert.deepEqual(ran, []);
      assert.equal(inbox.counts().applied, 0);
      assert.equal(inbox.counts().failed, 0, 'no handler-failed retries');
      assert.deepEqual(await f.effects(), []);
      const { rows } = await f.db.pool.query(`SELECT key FROM ${f.s}.inbox_versions WHERE version > 0`);
      assert.deepEqual(rows, [], 'no version recorded');
    });
  }

  test('inbox - an onEvent hook that throws or rejects is logged once and changes nothing', async () => {
    const f = await fixture();
    const unhandled: unknown[] = [];
    const onUnhandled = (err: unknown) => unhandled.push(err);
    process.on('unhandledRejection', onUnhandled);
    try {
      const logger = recordingLogger();
      let calls = 0;
      const inbox = f.inbox({
        mode: 'sequential',
        logger,
        handlers: {
          Set: async (event, { tx }) => {
            await tx.query(EFFECT_SQL(f.s).effect, [event.key, event.version.toString()]);
          },
        },
        // JSON.stringify of a report throws (its versions are bigints); every other call rejects.
        onEvent: ((r: InboxReport) => {
          calls++;
          if (calls % 2 === 0) return Promise.reject(new Error('async hook failed'));
          return JSON.stringify(r);
        }) as never,
      });
      await inbox.start();
      const events = Array.from({ length: 20 }, (_, i) => ferryEvent(f.stream.prefix, { key: `k${i % 4}`, version: Math.floor(i / 4) + 1 }));
      await publishEvents(f.stream.nc, events);
      await waitFor(() => inbox.counts().applied === 20, { what: 'all 20 applied', timeoutMs: 15_000 });
      await new Promise((r) => setTimeout(r, 300));
      assert.equal((await f.effects()).length, 20);
      assert.deepEqual(inbox.counts(), { applied: 20, stale: 0, duplicate: 0, gap: 0, failed: 0, parked: 0 });
      assert.ok(calls >= 20, `the hook ran for every event (${calls})`);
      const hookLines = logger.lines.filter((l) => /onEvent/.test(l.msg ?? ''));
      assert.equal(hookLines.length, 1, JSON.stringify(hookLines.map((l) => l.msg)));
      assert.deepEqual(unhandled, [], 'no unhandled rejection');
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
});
