// `ferry relay --otel` as a process: its send spans reach an OTLP/HTTP collector (a local
// HTTP server standing in for Jaeger or the OpenTelemetry Collector), in the event's trace.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream, waitFor } from '@ferry/testkit';
import { countPending, type RelayProcess, spawnRelay } from './relay-helpers.js';

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes: Array<{ key: string; value: OtlpValue }>;
}
interface OtlpRequest {
  resourceSpans: Array<{
    resource: { attributes: Array<{ key: string; value: OtlpValue }> };
    scopeSpans: Array<{ scope: { name: string }; spans: OtlpSpan[] }>;
  }>;
}

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const CREATE_SPAN_ID = '00f067aa0ba902b7';

describe('relay --otel', () => {
  let db: TestDatabase;
  let stream: TestStream;
  let collector: Server;
  let endpoint: string;
  const received: Array<{ path: string; contentType: string | undefined; body: OtlpRequest }> = [];
  const procs: RelayProcess[] = [];

  before(async () => {
    db = await createTestDatabase({ prefix: 'relay_otel', lanes: 2 });
    stream = await createTestStream({ prefix: 'relayotel' });
    collector = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        received.push({
          path: req.url ?? '',
          contentType: req.headers['content-type'],
          body: JSON.parse(Buffer.concat(chunks).toString('utf8')) as OtlpRequest,
        });
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    collector.listen(0, '127.0.0.1');
    await once(collector, 'listening');
    endpoint = `http://127.0.0.1:${(collector.address() as AddressInfo).port}/v1/traces`;
  });

  after(async () => {
    for (const p of procs) if (p.proc.exitCode === null && p.proc.signalCode === null) p.proc.kill('SIGKILL');
    collector?.close();
    await stream?.close();
    await db?.close();
  });

  test('relay - --otel exports each send span over OTLP/HTTP in the event trace, and flushes the last ones on SIGTERM', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'otel-test' });
    const [event] = await withTransaction(db.pool, (tx) =>
      publisher.publishMany(tx, [
        {
          subject: `${stream.prefix}.orders`,
          key: 'order-42',
          type: 'OrderPlaced',
          data: { id: 42 },
          headers: { traceparent: `00-${TRACE_ID}-${CREATE_SPAN_ID}-01` },
        },
      ]),
    );
    const relay = spawnRelay(
      [
        '--database-url',
        db.url,
        '--schema',
        db.schema,
        '--nats-url',
        stream.nc.getServer(),
        '--no-maintenance',
        '--http-port',
        '0',
        '--otel',
      ],
      // A batch delay longer than the test: the span can only arrive through the flush on shutdown.
      { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: endpoint, OTEL_BSP_SCHEDULE_DELAY: '600000', OTEL_SERVICE_NAME: '' },
    );
    procs.push(relay);
    await waitFor(async () => (await countPending(db.pool, db.schema)) === 0, { timeoutMs: 30_000, what: 'the event to be published' });
    assert.match(relay.output(), /exporting traces over OTLP\/HTTP/);
    assert.equal(received.length, 0, 'nothing exported before the batch delay or a flush');
    relay.proc.kill('SIGTERM');
    const { code } = await relay.exited;
    assert.equal(code, 0, relay.output());
    await waitFor(() => received.length > 0, { timeoutMs: 5_000, what: 'the flushed spans' });

    const req = received[0];
    assert.equal(req?.path, '/v1/traces');
    assert.match(req?.contentType ?? '', /json/);
    const resource = req?.body.resourceSpans[0]?.resource.attributes ?? [];
    assert.equal(resource.find((a) => a.key === 'service.name')?.value.stringValue, 'ferry-relay');
    const sends = received.flatMap((r) => r.body.resourceSpans.flatMap((rs) => rs.scopeSpans.flatMap((ss) => ss.spans)));
    const send = sends.find((s) => s.name === `send ${stream.prefix}.orders`);
    assert.ok(send, `a send span among ${sends.map((s) => s.name).join(', ')}`);
    assert.equal(send.traceId, TRACE_ID, 'in the trace of the event');
    assert.equal(send.parentSpanId, CREATE_SPAN_ID, 'a child of the creation context');
    const attr = (key: string) => send.attributes.find((a) => a.key === key)?.value;
    assert.equal(attr('messaging.message.id')?.stringValue, event?.id);
    assert.equal(attr('ferry.outcome')?.stringValue, 'acked');
    assert.equal(attr('ferry.stream')?.stringValue, stream.name);
  });
});
