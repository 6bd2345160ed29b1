import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { quoteIdentifier } from '@ferry/core';
import { createInbox, type Inbox } from '@ferry/inbox';
import { createTestDatabase, createTestStream, NatsServer, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import { ferryEvent, publishEvents } from './inbox-support.js';

// Kills and restarts NATS: a private nats-server, never the shared one.
let server: NatsServer | undefined;
let stream: TestStream | undefined;
let db: TestDatabase | undefined;
let inbox: Inbox | undefined;
after(async () => {
  await inbox?.stop().catch(() => {});
  await stream?.close().catch(() => {});
  await server?.stop();
  if (db) {
    await db.pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(`${db.schema}_boss`)} CASCADE`).catch(() => {});
    await db.close();
  }
});

describe('inbox and a NATS restart', () => {
  test('inbox - keeps consuming after nats-server is killed and restarted, without applying anything twice', async () => {
    server = await NatsServer.start();
    stream = await createTestStream({ servers: server.url, storage: 'file' });
    db = await createTestDatabase({ migrate: ['inbox'], max: 6 });
    const s = quoteIdentifier(db.schema);
    await db.pool.query(`CREATE TABLE ${s}.effects (key text NOT NULL, version bigint NOT NULL, PRIMARY KEY (key, version))`);
    const pool = db.pool;
    inbox = createInbox({
      pool,
      nc: stream.nc,
      stream: stream.name,
      consumer: 'billing',
      schema: db.schema,
      bossSchema: `${db.schema}_boss`,
      handlers: {
        Set: async (event, { tx }) => {
          await tx.query(`INSERT INTO ${s}.effects (key, version) VALUES ($1, $2)`, [event.key, event.version.toString()]);
        },
      },
    });
    await inbox.start();
    const p = stream.prefix;
    await publishEvents(
      stream.nc,
      [1, 2, 3].map((v) => ferryEvent(p, { key: 'a', version: v })),
    );
    const ib = inbox;
    await waitFor(() => ib.counts().applied === 3, { what: 'three applied before the restart' });

    await server.kill('SIGKILL');
    await sleep(500);
    await server.restart();
    const st = stream;
    // Publish as soon as the connection is back (file storage: the stream survived).
    await waitFor(
      async () => {
        await publishEvents(
          st.nc,
          [4, 5, 6].map((v) => ferryEvent(p, { key: 'a', version: v })),
        );
        return true;
      },
      { what: 'publish after the restart', timeoutMs: 20_000, intervalMs: 500 },
    );
    await waitFor(() => ib.counts().applied === 6, { what: 'the events after the restart applied', timeoutMs: 45_000, intervalMs: 100 });
    const { rows } = await pool.query<{ version: string }>(`SELECT version::text FROM ${s}.effects ORDER BY effects.version`);
    assert.deepEqual(
      rows.map((r) => r.version),
      ['1', '2', '3', '4', '5', '6'],
    );
    assert.equal(ib.state, 'running');
  });
});
