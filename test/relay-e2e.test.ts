import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { type Logger, quoteIdentifier, SILENT_LOGGER } from '@ferry/core';
import { compileRelayOptions, createRelay, type Relay, retrySpanMs } from '@ferry/relay';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream, uniqueName, waitFor } from '@ferry/testkit';
import { StorageType } from '@nats-io/jetstream';
import { markPending } from './delivery-state.js';
import { assertExactlyOnceInKeyOrder, countPending, publishEvents, readStream } from './relay-helpers.js';

describe('relay end to end', () => {
  let db: TestDatabase;
  let stream: TestStream;
  const relays: Relay[] = [];

  before(async () => {
    db = await createTestDatabase({ prefix: 'relay_e2e', lanes: 8 });
    stream = await createTestStream({ prefix: 'relaye2e' });
  });

  after(async () => {
    for (const r of relays) await r.stop();
    await stream?.close();
    await db?.close();
  });

  test('relay - every committed event reaches the stream exactly once, in per-key version order', async () => {
    const ids = await publishEvents(db.pool, db.schema, stream.prefix, 3000, { keys: 40 });
    const relay = createRelay({ databaseUrl: db.url, schema: db.schema, nats: { servers: stream.nc.getServer() }, maintenance: false });
    relays.push(relay);
    await relay.start();
    assert.equal(relay.lanes.length, 8, 'a single instance leases every lane');
    // Events committed while the relay runs are picked up too.
    const more = await publishEvents(db.pool, db.schema, stream.prefix, 500, { keys: 40, perTx: 7 });
    await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 30_000, what: 'the outbox to drain' });
    const events = await readStream(stream.nc, stream.name);
    assertExactlyOnceInKeyOrder(events, [...ids, ...more]);
    const metrics = await relay.metrics();
    assert.match(metrics, /ferry_events_published_total 3500/);
    assert.match(metrics, /ferry_lanes_owned 8/);
    assert.match(metrics, /ferry_outbox_backlog 0/);
    // Every claim statement is counted (polls that find nothing too, so no upper bound holds under a slow machine).
    const claims = Number(/^ferry_relay_claims_total (\d+)$/m.exec(metrics)?.[1]);
    assert.ok(claims >= 1, `ferry_relay_claims_total is ${claims}`);
  });

  test('relay - 600 keys in flight at once (chains end without waking the claim loop each time): every event once, in key order', async () => {
    // Over 64 keys in flight, a chain that ends does not wake the claim loop (the 5 ms poll or half the
    // keys released does): no key may be left behind by it.
    const wide = await createTestStream({ prefix: 'relaye2ewide' });
    try {
      const ids = await publishEvents(db.pool, db.schema, wide.prefix, 2400, { keys: 600, perTx: 600, keyPrefix: 'wide-' });
      await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 30_000, what: 'the wide backlog to drain' });
      assertExactlyOnceInKeyOrder(await readStream(wide.nc, wide.name), ids);
    } finally {
      await wide.close();
    }
  });

  test('relay - a row is marked published only with a PubAck, and a duplicate PubAck counts as success', async () => {
    // Reset one published row to unpublished: the re-send gets a duplicate PubAck and the row is marked again.
    const s = quoteIdentifier(db.schema);
    const { rows } = await db.pool.query<{ seq: string; id: string }>(
      `SELECT seq, id FROM ${s}.outbox WHERE seq = (SELECT min(seq) FROM ${s}.outbox)`,
    );
    assert.equal(rows.length, 1);
    assert.equal(await markPending(db.pool, db.schema, 'o.seq = $1', [rows[0]?.seq]), 1, 'the published row is pending again');
    await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 10_000, what: 'the re-sent row to be marked' });
    const events = await readStream(stream.nc, stream.name);
    assert.equal(events.filter((e) => e.id === rows[0]?.id).length, 1, 'the re-send was dropped by JetStream as a duplicate');
  });

  test('relay - --ensure-stream creates a missing stream with a duplicate window of at least the retry span', async () => {
    const name = uniqueName('ENSURED').toUpperCase();
    const subject = name.toLowerCase();
    const options = { databaseUrl: db.url, schema: db.schema, nats: { servers: stream.nc.getServer() }, maintenance: false };
    const relay = createRelay({ ...options, ensureStreams: [{ name, subjects: [`${subject}.>`] }] });
    relays.push(relay);
    await relay.start();
    try {
      const info = await stream.jsm.streams.info(name);
      assert.deepEqual(info.config.subjects, [`${subject}.>`]);
      assert.ok(info.config.duplicate_window / 1e6 >= retrySpanMs(compileRelayOptions(options)), 'the window covers the longest retry');
    } finally {
      await relay.stop();
      await stream.jsm.streams.delete(name);
    }
  });

  test('relay - --ensure-stream adds the subjects an existing stream lacks, keeps the ones it has, and logs it', async () => {
    const name = uniqueName('ENSUREADD').toUpperCase();
    const subject = name.toLowerCase();
    await stream.jsm.streams.add({ name, subjects: [`${subject}.a.>`, `${subject}.keep`], storage: StorageType.Memory });
    const lines: Array<{ obj: Record<string, unknown>; msg?: string }> = [];
    const logger: Logger = {
      ...SILENT_LOGGER,
      info: (obj: object, msg?: string) => lines.push({ obj: obj as Record<string, unknown>, msg }),
      child: () => logger,
    };
    const options = { databaseUrl: db.url, schema: db.schema, nats: { servers: stream.nc.getServer() }, maintenance: false, logger };
    // a.x is covered by a.> already: adding it would make the stream's own subjects overlap.
    const relay = createRelay({ ...options, ensureStreams: [{ name, subjects: [`${subject}.a.x`, `${subject}.b.>`] }] });
    relays.push(relay);
    try {
      await relay.start();
      const info = await stream.jsm.streams.info(name);
      assert.deepEqual(info.config.subjects, [`${subject}.a.>`, `${subject}.keep`, `${subject}.b.>`]);
      const logged = lines.find((l) => /added the subject\(s\) it lacked/.test(l.msg ?? ''));
      assert.ok(logged, 'the change is logged');
      assert.deepEqual(logged.obj.added, [`${subject}.b.>`]);
      await relay.stop();
      // A second start finds nothing missing and changes nothing.
      lines.length = 0;
      const again = createRelay({ ...options, ensureStreams: [{ name, subjects: [`${subject}.b.>`] }] });
      relays.push(again);
      await again.start();
      await again.stop();
      assert.equal(lines.filter((l) => /added the subject/.test(l.msg ?? '')).length, 0);
      assert.equal((await stream.jsm.streams.info(name)).config.subjects?.length, 3);
    } finally {
      await relay.stop();
      await stream.jsm.streams.delete(name);
    }
  });

  test('relay - --ensure-stream fails at start, naming the stream, the subjects and the fix, when the stream refuses them', async () => {
    const name = uniqueName('ENSUREREF').toUpperCase();
    const other = `${name}_OTHER`;
    const subject = name.toLowerCase();
    await stream.jsm.streams.add({ name, subjects: [`${subject}.a.>`], storage: StorageType.Memory });
    await stream.jsm.streams.add({ name: other, subjects: [`${subject}.taken.>`], storage: StorageType.Memory });
    const relay = createRelay({
      databaseUrl: db.url,
      schema: db.schema,
      nats: { servers: stream.nc.getServer() },
      maintenance: false,
      ensureStreams: [{ name, subjects: [`${subject}.taken.>`] }],
    });
    try {
      await assert.rejects(relay.start(), (err: Error) => {
        assert.equal(err.name, 'ConfigError');
        assert.match(err.message, new RegExp(`stream ${name} exists and refused the subjects it lacks \\(${subject}\\.taken\\.>\\)`));
        assert.match(err.message, new RegExp(`stream\\(s\\) ${other} already bind them`));
        assert.match(err.message, /Fix: bind them to one stream only/);
        return true;
      });
      assert.deepEqual((await stream.jsm.streams.info(name)).config.subjects, [`${subject}.a.>`], 'no subject removed or added');
    } finally {
      await relay.stop().catch(() => {});
      await stream.jsm.streams.delete(name);
      await stream.jsm.streams.delete(other);
    }
  });

  test('relay - a fixed --lanes-per-instance caps the lanes each instance leases', async () => {
    const options = { databaseUrl: db.url, schema: db.schema, nats: { servers: stream.nc.getServer() }, maintenance: false };
    await relays[0]?.stop(); // the first test's relay holds every lane
    const a = createRelay({ ...options, lanesPerInstance: 3 });
    const b = createRelay({ ...options, lanesPerInstance: 3 });
    relays.push(a, b);
    await a.start();
    await b.start();
    await waitFor(() => a.lanes.length === 3 && b.lanes.length === 3, { timeoutMs: 5000, what: 'three lanes each' });
    assert.equal(new Set([...a.lanes, ...b.lanes]).size, 6, 'no lane is held twice');
    await a.stop();
    await b.stop();
  });

  test('relay - starting on an unmigrated schema fails with what to do', async () => {
    const relay = createRelay({ databaseUrl: db.url, schema: 'relay_no_such_schema', nats: { servers: stream.nc.getServer() } });
    await assert.rejects(relay.start(), /no Ferry outbox tables: run ferry migrate --schema relay_no_such_schema first/);
    assert.equal(relay.state, 'failed');
    await relay.stop();
  });
});
