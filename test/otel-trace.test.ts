// One trace across the three parts, recorded with the real OpenTelemetry SDK and an
// in-memory exporter: an HTTP request through @ferry/idempotency's node:http binding
// publishes an event, the relay sends it, the inbox applies it, and a duplicate delivery
// shows as such. Real PostgreSQL and NATS.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { eventFromOutboxRow, type OutboxEventRow, quoteIdentifier } from '@ferry/core';
import { createIdempotency, nodeHttpIdempotency } from '@ferry/idempotency';
import { createInbox, type Inbox } from '@ferry/inbox';
import { createPublisher } from '@ferry/publisher';
import { createRelay, type Relay } from '@ferry/relay';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import { context, type HrTime, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
  type Span,
  type SpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { markPending } from './delivery-state.js';
import { publishEvents } from './inbox-support.js';
import { countPending } from './relay-helpers.js';

/** Spans started and not ended: must be none once the parts are stopped. */
const open = new Set<Span>();
let started = 0;
const tracker: SpanProcessor = {
  onStart: (span) => {
    started++;
    open.add(span);
  },
  onEnd: (span) => void open.delete(span as unknown as Span),
  forceFlush: async () => {},
  shutdown: async () => {},
};
const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [tracker, new SimpleSpanProcessor(exporter)] });
const contextManager = new AsyncLocalStorageContextManager().enable();
const tracer = provider.getTracer('otel-trace.test');

const ns = (t: HrTime) => BigInt(t[0]) * 1_000_000_000n + BigInt(t[1]);
/**
 * Whether time `a` is not after `b`, as far as the SDK's times can tell. A span's start is Date.now(),
 * whole milliseconds, and its end that start plus a precise duration (@opentelemetry/sdk-trace's
 * Span._getTime), so a span that ran inside another can read up to 1 ms outside it: 'create runs
 * inside the request' failed so on a loaded machine.
 */
const notAfter = (a: HrTime, b: HrTime) => ns(a) <= ns(b) + 1_000_000n;
const spans = () => exporter.getFinishedSpans();
const named = (prefix: string) => spans().filter((s) => s.name.startsWith(prefix));
const only = (prefix: string): ReadableSpan => {
  const found = named(prefix);
  assert.equal(found.length, 1, `one span named ${prefix}…, got ${found.map((s) => s.name).join(', ')}`);
  return found[0] as ReadableSpan;
};
const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;

describe('OpenTelemetry: one trace from the HTTP request to the inbox handler', () => {
  let db: TestDatabase;
  let stream: TestStream;
  let server: Server;
  let url: string;
  let relay: Relay;
  let inbox: Inbox;
  let bossSchema: string;

  before(async () => {
    trace.setGlobalTracerProvider(provider);
    context.setGlobalContextManager(contextManager);
    db = await createTestDatabase({ prefix: 'otel', migrate: ['outbox', 'inbox', 'idempotency'], lanes: 2, max: 8 });
    stream = await createTestStream({ prefix: 'otel' });
    bossSchema = `${db.schema}_boss`;
    const s = quoteIdentifier(db.schema);
    await db.pool.query(`CREATE TABLE ${s}.orders (id serial PRIMARY KEY, sku text NOT NULL)`);
    await db.pool.query(`CREATE TABLE ${s}.invoices (order_id int PRIMARY KEY)`);
    const publisher = createPublisher({ schema: db.schema, source: 'orders-service' });
    const keys = createIdempotency({ schema: db.schema, scope: 'orders' });
    const endpoint = nodeHttpIdempotency(keys, {
      pool: db.pool,
      globalKeys: true, // one test client; keys per caller are idempotency-callers.test.ts's subject
      handler: async (_req, tx, body) => {
        const { sku } = body as { sku: string };
        const { rows } = await tx.query<{ id: number }>(`INSERT INTO ${s}.orders (sku) VALUES ($1) RETURNING id`, [sku]);
        const id = rows[0]?.id as number;
        await publisher.publish(tx, { subject: `${stream.prefix}.orders`, key: `order-${id}`, type: 'OrderPlaced', data: { id, sku } });
        return { status: 201, body: { id } };
      },
    });
    // What HTTP auto-instrumentation does: a SERVER span, active while the request is handled.
    server = createServer((req, res) => {
      tracer.startActiveSpan(`${req.method} /orders`, { kind: SpanKind.SERVER }, (span) => {
        res.on('finish', () => span.end());
        endpoint(req, res);
      });
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/orders`;
    relay = createRelay({ databaseUrl: db.url, schema: db.schema, nats: { servers: stream.nc.getServer() }, maintenance: false });
    await relay.start();
    inbox = createInbox({
      pool: db.pool,
      nc: stream.nc,
      stream: stream.name,
      consumer: 'billing',
      schema: db.schema,
      bossSchema,
      handlers: {
        OrderPlaced: (event, { tx }) =>
          // The handler's own span: it must nest under the inbox's process span.
          tracer.startActiveSpan('charge card', async (span) => {
            await tx.query(`INSERT INTO ${s}.invoices (order_id) VALUES ($1) ON CONFLICT DO NOTHING`, [
              (event.payload as { id: number }).id,
            ]);
            span.end();
          }),
      },
    });
    await inbox.start();
  });

  after(async () => {
    await inbox?.stop();
    await relay?.stop();
    server?.close();
    await stream?.close();
    await db?.pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(bossSchema)} CASCADE`).catch(() => {});
    await db?.close();
    trace.disable();
    context.disable();
  });

  test('otel - request, create, send, process and the handler are one trace, in order, each hop a child of the one before', async () => {
    const post = () =>
      fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'order-42' },
        body: '{"sku":"book"}',
      });
    const res = await post();
    assert.equal(res.status, 201);
    await waitFor(() => inbox.counts().applied === 1, { timeoutMs: 20_000, what: 'the inbox to apply the event' });
    await waitFor(() => named('charge card').length === 1 && named('process ').length === 1, { timeoutMs: 5_000, what: 'the spans' });

    const http = only('POST /orders');
    const create = only('create ');
    const send = only('send ');
    const process = only('process ');
    const handler = only('charge card');
    const traceId = http.spanContext().traceId;
    for (const s of [create, send, process, handler]) assert.equal(s.spanContext().traceId, traceId, `${s.name} is in the request's trace`);

    // Kinds and parents per the messaging conventions.
    assert.equal(create.kind, SpanKind.PRODUCER);
    assert.equal(parentOf(create), http.spanContext().spanId, 'create is a child of the request');
    assert.equal(send.kind, SpanKind.CLIENT);
    assert.equal(parentOf(send), create.spanContext().spanId, 'send is a child of the creation context');
    assert.deepEqual(
      send.links.map((l) => l.context.spanId),
      [create.spanContext().spanId],
      'send links to the creation context',
    );
    assert.equal(process.kind, SpanKind.CONSUMER);
    assert.equal(parentOf(process), create.spanContext().spanId, 'process is a child of the creation context');
    assert.deepEqual(
      process.links.map((l) => l.context.spanId),
      [create.spanContext().spanId],
    );
    assert.equal(parentOf(handler), process.spanContext().spanId, "the handler's span nests under process");

    // The hops in order.
    assert.ok(notAfter(create.endTime, send.startTime), 'the relay sends after the publish returned');
    assert.ok(notAfter(send.startTime, process.startTime), 'the inbox processes after the relay sent');
    assert.ok(
      notAfter(process.startTime, handler.startTime) && notAfter(handler.endTime, process.endTime),
      'the handler runs inside process',
    );
    assert.ok(
      notAfter(http.startTime, create.startTime) && notAfter(create.endTime, http.endTime),
      `create runs inside the request: request ${ns(http.startTime)}-${ns(http.endTime)} ns, create ${ns(create.startTime)}-${ns(create.endTime)} ns`,
    );

    // Attributes an operator filters on: the event id on all three, the outcome of each hop.
    const { rows } = await db.pool.query<{ id: string; key: string }>(`SELECT id::text, key FROM ${quoteIdentifier(db.schema)}.outbox`);
    const id = rows[0]?.id;
    for (const s of [create, send, process]) {
      assert.equal(s.attributes['messaging.message.id'], id, `${s.name} carries the event id`);
      assert.equal(s.attributes['messaging.system'], 'nats');
      assert.equal(s.attributes['messaging.destination.name'], `${stream.prefix}.orders`);
      assert.equal(s.attributes['ferry.event.key'], rows[0]?.key);
      assert.equal(s.attributes['ferry.event.version'], '1');
    }
    assert.equal(create.attributes['messaging.operation.type'], 'create');
    assert.equal(send.attributes['messaging.operation.type'], 'send');
    assert.equal(send.attributes['ferry.stream'], stream.name);
    assert.equal(send.attributes['ferry.attempt'], 1);
    assert.equal(send.attributes['ferry.outcome'], 'acked');
    assert.equal(process.attributes['messaging.operation.type'], 'process');
    assert.equal(process.attributes['messaging.consumer.group.name'], 'billing');
    assert.equal(process.attributes['ferry.outcome'], 'applied');
    assert.equal(process.attributes['ferry.deliveries'], 1);
    for (const s of [create, send, process, handler]) assert.notEqual(s.status.code, SpanStatusCode.ERROR, `${s.name} did not fail`);

    // The client retries the request: the idempotency binding replays the stored answer, nothing is published again.
    const again = await post();
    assert.equal(again.status, 201);
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.equal(named('POST /orders').length, 2);
    assert.equal(named('create ').length, 1, 'a replayed request creates no event');
  });

  test('otel - a re-sent and a redelivered event show as duplicate on the relay and on the inbox, in the same trace', async () => {
    const s = quoteIdentifier(db.schema);
    const create = only('create ');
    // The relay sends the row again (as after a crash before marking): JetStream drops it, the span says so.
    // Its first mark may still be on its way (the inbox can apply the event before the relay marks it): reset
    // the row only once it is marked, or the late mark publishes it again and nothing is re-sent.
    await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 10_000, what: 'the first send to be marked' });
    assert.ok((await markPending(db.pool, db.schema, 'true')) > 0, 'the sent row pending again');
    await waitFor(() => named('send ').length === 2, { timeoutMs: 10_000, what: 'the re-send' });
    const resend = named('send ')[1] as ReadableSpan;
    assert.equal(resend.attributes['ferry.outcome'], 'duplicate');
    assert.equal(resend.spanContext().traceId, create.spanContext().traceId);

    // The stream delivers it again under another message id (as `ferry replay` does): the inbox's gate drops it.
    const { rows } = await db.pool.query<OutboxEventRow>(`SELECT * FROM ${s}.outbox`);
    await publishEvents(stream.nc, [eventFromOutboxRow(rows[0] as OutboxEventRow)], { msgIdSuffix: 'replay-1' });
    await waitFor(() => inbox.counts().duplicate === 1, { timeoutMs: 10_000, what: 'the duplicate' });
    await waitFor(() => named('process ').length === 2, { timeoutMs: 5_000, what: 'the second process span' });
    const dup = named('process ')[1] as ReadableSpan;
    assert.equal(dup.attributes['ferry.outcome'], 'duplicate');
    assert.equal(dup.spanContext().traceId, create.spanContext().traceId, 'the duplicate is in the event’s trace');
    assert.equal(parentOf(dup), create.spanContext().spanId);
    assert.equal(named('charge card').length, 1, 'the handler did not run again');
  });

  test('otel - publish outside a span writes no trace context; an explicit traceparent or id is kept and makes no create span', async () => {
    const s = quoteIdentifier(db.schema);
    const publisher = createPublisher({ schema: db.schema, source: 'orders-service' });
    const given = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    const creates = named('create ').length;
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      // Outside any span: nothing to propagate.
      const plain = await publisher.publish(client, { subject: 'elsewhere.a', key: 'no-span', type: 'T', data: {} });
      await tracer.startActiveSpan('job', async (span) => {
        const explicit = await publisher.publish(client, {
          subject: 'elsewhere.a',
          key: 'given',
          type: 'T',
          data: {},
          headers: { traceparent: given },
        });
        const withId = await publisher.publish(client, {
          subject: 'elsewhere.a',
          key: 'with-id',
          type: 'T',
          data: {},
          id: crypto.randomUUID(),
        });
        const traced = await publisher.publish(client, { subject: 'elsewhere.a', key: 'traced', type: 'T', data: {} });
        span.end();
        const { rows } = await client.query<{ id: string; headers: Record<string, string> }>(
          `SELECT id::text, headers FROM ${s}.outbox WHERE id = ANY($1::uuid[])`,
          [[plain.id, explicit.id, withId.id, traced.id]],
        );
        const headers = new Map(rows.map((r) => [r.id, r.headers]));
        assert.deepEqual(headers.get(plain.id), {}, 'no span, no traceparent');
        assert.deepEqual(headers.get(explicit.id), { traceparent: given }, 'the caller’s traceparent wins');
        assert.deepEqual(headers.get(withId.id), {}, 'an event with its own id gets no creation context');
        const create = named('create ').at(-1) as ReadableSpan;
        assert.equal(headers.get(traced.id)?.traceparent, `00-${create.spanContext().traceId}-${create.spanContext().spanId}-01`);
        assert.equal(create.spanContext().traceId, span.spanContext().traceId);
      });
      assert.equal(named('create ').length, creates + 1, 'one create span: only for the traced event');
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  });

  test('otel - an event published outside any span gets the relay send span as its creation context', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'orders-service' });
    const client = await db.pool.connect();
    let id: string;
    try {
      await client.query('BEGIN');
      ({ id } = await publisher.publish(client, {
        subject: `${stream.prefix}.orders`,
        key: 'cron-1',
        type: 'OrderPlaced',
        data: { id: 1000 },
      }));
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    const byId = (prefix: string) => named(prefix).filter((x) => x.attributes['messaging.message.id'] === id);
    await waitFor(() => byId('process ').length === 1, { timeoutMs: 15_000, what: 'the event to be processed' });
    const send = byId('send ')[0] as ReadableSpan;
    const process = byId('process ')[0] as ReadableSpan;
    assert.equal(parentOf(send), undefined, 'the send span starts the trace');
    assert.equal(process.spanContext().traceId, send.spanContext().traceId);
    assert.equal(parentOf(process), send.spanContext().spanId, 'process is a child of the send span');
    assert.equal(process.attributes['ferry.outcome'], 'applied');
  });

  test('otel - a failed send is recorded on its span, with the reason and the attempt', async () => {
    const s = quoteIdentifier(db.schema);
    const publisher = createPublisher({ schema: db.schema, source: 'orders-service' });
    // No stream binds this subject: JetStream answers no responders, the row backs off and is retried.
    const subject = `nostream${stream.prefix}.orders`;
    const event = await tracer.startActiveSpan('job', async (span) => {
      const client = await db.pool.connect();
      try {
        await client.query('BEGIN');
        const e = await publisher.publish(client, { subject, key: 'lost', type: 'OrderPlaced', data: {} });
        await client.query('COMMIT');
        return e;
      } finally {
        client.release();
        span.end();
      }
    });
    await waitFor(() => named(`send ${subject}`).length >= 1, { timeoutMs: 15_000, what: 'the failed send' });
    const failed = named(`send ${subject}`)[0] as ReadableSpan;
    assert.equal(failed.status.code, SpanStatusCode.ERROR);
    assert.equal(failed.attributes['ferry.outcome'], 'no_responders');
    assert.equal(failed.attributes['error.type'], 'no_responders');
    assert.equal(failed.attributes['ferry.attempt'], 1);
    assert.equal(failed.attributes['messaging.message.id'], event.id);
    assert.ok(
      failed.events.some((e) => e.name === 'exception'),
      'the error is recorded on the span',
    );
    // Settle the row so the relay stops retrying it.
    await db.pool.query(`UPDATE ${s}.outbox_pending p SET dead_at = now() FROM ${s}.outbox o WHERE o.seq = p.seq AND o.id = $1`, [
      event.id,
    ]);
  });

  test('otel - no span is left open once the relay and the inbox have stopped', async () => {
    await inbox.stop();
    await relay.stop();
    assert.deepEqual(
      [...open].map((s) => (s as unknown as ReadableSpan).name),
      [],
    );
    assert.ok(started >= 8, `${started} spans started`);
    assert.equal(spans().length, started, 'every span started was ended and exported');
  });
});
