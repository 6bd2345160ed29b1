// Issue 43 item 6: a key backing off on a subject no stream binds logged nothing at info or warn
// until it went dead (about 22 minutes with the defaults). Now its head's first failure logs one
// warn line naming the key, the reason and the fix, and so does each doubling of its attempts:
// attempts 1, 2, 4, 8 and so on, never every attempt.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { type Logger, quoteIdentifier, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createRelay, type Relay } from '@ferry/relay';
import { createTestDatabase, createTestStream, natsUrl, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';

interface Line {
  level: 'debug' | 'info' | 'warn' | 'error';
  obj: Record<string, unknown>;
  msg: string;
}

/** A logger that keeps every line, whichever component child logs it. */
function recordingLogger(lines: Line[]): Logger {
  const at =
    (level: Line['level']) =>
    (obj: object, msg?: string): void => {
      lines.push({ level, obj: obj as Record<string, unknown>, msg: msg ?? '' });
    };
  const logger: Logger = { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error'), child: () => logger };
  return logger;
}

describe('relay logs a backing-off key', () => {
  let db: TestDatabase;
  let stream: TestStream;
  let relay: Relay | undefined;

  before(async () => {
    db = await createTestDatabase({ prefix: 'backoff_log', lanes: 2 });
    stream = await createTestStream({ prefix: 'BOLOG' });
  });
  after(async () => {
    await relay?.stop();
    await stream?.close();
    await db?.close();
  });

  test('relay - a head on an unbound subject logs one warn line with key, reason and fix at attempts 1, 2, 4, 8 …, not at every attempt', async () => {
    const unbound = `${stream.prefix}_nobody.orders`;
    const publisher = createPublisher({ schema: db.schema, source: 'backoff-log-test' });
    const { id } = await withTransaction(db.pool, (tx) =>
      publisher.publish(tx, { subject: unbound, key: 'stuck-key', type: 'T', data: { n: 1 } }),
    );
    const lines: Line[] = [];
    // Short backoff so a dozen attempts take a few seconds; far from dead (maxAttempts 1000).
    relay = createRelay({
      databaseUrl: db.url,
      schema: db.schema,
      nats: { servers: natsUrl() },
      maintenance: false,
      maxAttempts: 1000,
      backoffBaseMs: 20,
      backoffMaxMs: 100,
      pollIntervalMs: 50,
      logger: recordingLogger(lines),
    });
    await relay.start();
    const attemptsSql = `SELECT attempts FROM ${quoteIdentifier(db.schema)}.outbox_events WHERE id = $1`;
    const attempts = async () => (await db.pool.query<{ attempts: number }>(attemptsSql, [id])).rows[0]?.attempts ?? 0;
    await waitFor(async () => (await attempts()) >= 10, { timeoutMs: 120_000, what: 'ten failed attempts' });
    await relay.stop();
    relay = undefined;
    const tried = await attempts();
    const warned = lines.filter((l) => l.level === 'warn' && l.obj.key === 'stuck-key');
    // 1, 2, 4, 8 (and 16 … if it got there): floor(log2(tried)) + 1 lines.
    const expected = Math.floor(Math.log2(tried)) + 1;
    assert.equal(warned.length, expected, `${tried} attempts: ${warned.map((l) => l.obj.attempt).join(',')}`);
    assert.deepEqual(
      warned.map((l) => l.obj.attempt),
      Array.from({ length: expected }, (_, i) => 2 ** i),
    );
    for (const l of warned) {
      assert.equal(l.obj.reason, 'no_responders');
      assert.match(l.msg, /^key stuck-key is backing off: attempt \d+ of 1000 failed/);
      assert.ok(l.msg.includes(`no stream binds subject ${unbound}`), l.msg);
      assert.match(l.msg, /add it to a stream \(ferry streams ensure STREAM=/);
    }
    assert.equal(lines.filter((l) => l.level === 'error' && l.obj.key === 'stuck-key').length, 0, 'not dead, no error line');
  });
});
