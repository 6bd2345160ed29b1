import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createTestStream, NatsServer, type TestStream } from '@ferry/testkit';
import { JetStreamApiError, jetstreamManager, StorageType } from '@nats-io/jetstream';
import {
  ClosedConnectionError,
  connect,
  headers,
  NoRespondersError,
  PermissionViolationError,
  TimeoutError,
} from '@nats-io/transport-node';
import { classifyPublishError } from '../errors.js';
import { PubAcks } from './pub-acks.js';

// The relay's own PubAck path against the real server: each way a publish can end must raise the
// error nats.js's js.publish() raises, so that classifyPublishError sorts it as before.

let stream: TestStream;
before(async () => {
  stream = await createTestStream({ prefix: 'pubacks' });
});
after(() => stream.close());

function msgId(id: string) {
  const h = headers();
  h.set('Nats-Msg-Id', id);
  return h;
}

const body = new TextEncoder().encode('{"n":1}');

describe('relay PubAcks', () => {
  test('relay - a PubAck per message, in order; the same Nats-Msg-Id again is acknowledged as a duplicate', async () => {
    const acks = new PubAcks(stream.nc, 5_000);
    try {
      const got = await Promise.all(Array.from({ length: 50 }, (_, i) => acks.publish(`${stream.prefix}.a`, body, msgId(`m-${i}`))));
      assert.deepEqual(
        got.map((a) => a.seq),
        Array.from({ length: 50 }, (_, i) => i + 1),
      );
      assert.ok(got.every((a) => a.stream === stream.name && a.duplicate === false));
      const again = await acks.publish(`${stream.prefix}.a`, body, msgId('m-7'));
      assert.deepEqual([again.seq, again.duplicate], [8, true]);
      assert.equal(acks.pending, 0);
    } finally {
      acks.close();
    }
  });

  test('relay - no stream binds the subject: NoRespondersError at once, classified no_responders (not a NATS outage)', async () => {
    const acks = new PubAcks(stream.nc, 5_000);
    try {
      const started = Date.now();
      const err = await acks.publish('pubacks-unbound.x', body, msgId('u-1')).then(
        () => assert.fail('published to an unbound subject'),
        (e: unknown) => e,
      );
      assert.ok(err instanceof NoRespondersError, String(err));
      assert.ok(Date.now() - started < 2_000, 'answered by the server, not by the timeout');
      assert.deepEqual(classifyPublishError(err).reason, 'no_responders');
      assert.equal(classifyPublishError(err).transport, false);
    } finally {
      acks.close();
    }
  });

  test('relay - a message over the stream max_msg_size: JetStreamApiError 10054, classified permanent max_payload', async () => {
    const small = `${stream.name}_SMALL`;
    await stream.jsm.streams.add({ name: small, subjects: [`${stream.prefix}-small.>`], storage: StorageType.Memory, max_msg_size: 16 });
    const acks = new PubAcks(stream.nc, 5_000);
    try {
      const err = await acks.publish(`${stream.prefix}-small.x`, new Uint8Array(64), msgId('big-1')).then(
        () => assert.fail('the stream took a message over its max_msg_size'),
        (e: unknown) => e,
      );
      assert.ok(err instanceof JetStreamApiError, String(err));
      assert.equal(err.code, 10054);
      assert.deepEqual(classifyPublishError(err), {
        reason: 'max_payload',
        permanent: true,
        transport: false,
        message: classifyPublishError(err).message,
      });
    } finally {
      acks.close();
      await stream.jsm.streams.delete(small);
    }
  });

  test('relay - nobody answers: TimeoutError after the timeout, oldest first; a late answer changes nothing', async () => {
    // A core subscriber takes the subject and answers only after the timeout: no 503, no PubAck in time.
    const late: Promise<void>[] = [];
    const silent = stream.nc.subscribe('pubacks-silent.>', {
      callback: (_err, m) => {
        late.push(new Promise((r) => setTimeout(() => r(void m.respond(JSON.stringify({ stream: 'LATE', seq: 1 }))), 600)));
      },
    });
    const acks = new PubAcks(stream.nc, 300);
    try {
      const started = Date.now();
      const first = acks.publish('pubacks-silent.a', body, msgId('s-1')).catch((e: unknown) => ({ e, at: Date.now() - started }));
      await new Promise((r) => setTimeout(r, 100));
      const second = acks.publish('pubacks-silent.b', body, msgId('s-2')).catch((e: unknown) => ({ e, at: Date.now() - started }));
      const ok = acks.publish(`${stream.prefix}.t`, body, msgId('s-3'));
      const [a, b, c] = await Promise.all([first, second, ok]);
      assert.ok(a && 'e' in a && a.e instanceof TimeoutError, String(a));
      assert.ok(b && 'e' in b && b.e instanceof TimeoutError, String(b));
      assert.ok(a.at >= 290 && a.at < 1_000, `first timed out after ${a.at} ms`);
      assert.ok(b.at >= 390 && b.at < 1_100, `second timed out after ${b.at} ms`);
      assert.equal(c.duplicate, false, 'a bound subject beside them was acknowledged');
      assert.equal(classifyPublishError(a.e).reason, 'timeout');
      assert.equal(classifyPublishError(a.e).transport, true);
      assert.equal(acks.pending, 0);
      await Promise.all(late);
      await stream.nc.flush();
      await new Promise((r) => setTimeout(r, 50));
      assert.equal(late.length, 2, 'both late answers were sent');
      assert.equal(acks.pending, 0, 'a late answer is dropped');
    } finally {
      silent.unsubscribe();
      acks.close();
    }
  });

  test('relay - an answer that is not a PubAck (null, a list, a string error, no seq, not JSON) fails that message only; an API error is the stream refusing it', async () => {
    const answers = [
      'null',
      '[]',
      '{"error":"x"}',
      '{"stream":"S"}',
      '{"stream":"","seq":1}',
      'not json',
      '{"__proto__":{"stream":"S","seq":1}}',
      '{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}',
    ];
    const forger = stream.nc.subscribe('pubacks-forged.>', {
      callback: (_err, m) => {
        m.respond(answers[Number(m.subject.split('.')[1])] ?? '');
      },
    });
    const acks = new PubAcks(stream.nc, 5_000);
    try {
      const results = await Promise.allSettled(answers.map((_, i) => acks.publish(`pubacks-forged.${i}`, body, msgId(`f-${i}`))));
      for (const [i, r] of results.entries()) {
        assert.equal(r.status, 'rejected', `answer ${answers[i]} was taken for a PubAck`);
        const reason = (r as PromiseRejectedResult).reason;
        if (i === answers.length - 1) {
          assert.ok(reason instanceof JetStreamApiError, String(reason));
          assert.deepEqual(
            [reason.code, reason.message, classifyPublishError(reason).reason],
            [10077, 'maximum messages exceeded', 'rejected'],
          );
        } else assert.match(String(reason), /invalid PubAck for pubacks-forged\.\d/);
      }
      assert.equal((await acks.publish(`${stream.prefix}.after`, body, msgId('f-ok'))).duplicate, false, 'still publishing');
      assert.equal(acks.pending, 0);
    } finally {
      forger.unsubscribe();
      acks.close();
    }
  });

  test('relay - what nc.publish refuses at once (a subject with a space) rejects the promise, it does not throw', async () => {
    const acks = new PubAcks(stream.nc, 5_000);
    try {
      const p = acks.publish('bad subject', body, msgId('b-1'));
      await assert.rejects(p, /subject/i);
      assert.equal(acks.pending, 0);
    } finally {
      acks.close();
    }
  });

  test('relay - close() fails what is still awaited, and any later publish, with ClosedConnectionError', async () => {
    const silent = stream.nc.subscribe('pubacks-closing.>', { callback: () => {} });
    const acks = new PubAcks(stream.nc, 60_000);
    try {
      const p = acks.publish('pubacks-closing.a', body, msgId('c-1'));
      acks.close();
      await assert.rejects(p, (e: unknown) => e instanceof ClosedConnectionError);
      await assert.rejects(acks.publish(`${stream.prefix}.late`, body, msgId('c-2')), (e: unknown) => e instanceof ClosedConnectionError);
      assert.equal(acks.pending, 0, 'nothing sent after close');
      assert.equal(classifyPublishError(new ClosedConnectionError()).reason, 'connection');
    } finally {
      silent.unsubscribe();
    }
  });

  test('relay - a publish the server denies: PermissionViolationError for that subject only, classified permanent permission', async () => {
    const server = await NatsServer.start({
      config: `authorization { users = [ { user: "relay", password: "pw", permissions: { publish: { allow: [">"], deny: ["ev.denied"] }, subscribe: { allow: ["_INBOX.>"] } } } ] }`,
    });
    const nc = await connect({ servers: server.url, user: 'relay', pass: 'pw' });
    try {
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: 'EV', subjects: ['ev.>'], storage: StorageType.Memory });
      const acks = new PubAcks(nc, 5_000);
      const denied = acks.publish('ev.denied', body, msgId('p-1')).then(
        () => assert.fail('a denied publish was acknowledged'),
        (e: unknown) => e,
      );
      const allowed = acks.publish('ev.allowed', body, msgId('p-2'));
      const err = await denied;
      assert.ok(err instanceof PermissionViolationError, String(err));
      assert.deepEqual([classifyPublishError(err).reason, classifyPublishError(err).permanent], ['permission', true]);
      assert.equal((await allowed).seq, 1, 'the other subject was not failed with it');
      acks.close();
    } finally {
      await nc.close();
      await server.stop();
    }
  });

  test('relay - while the client reconnects, a publish is refused at once (ConnectionError) and never written once the connection is back', async () => {
    const server = await NatsServer.start();
    const nc = await connect({ servers: server.url, reconnectTimeWait: 100, maxReconnectAttempts: -1 });
    try {
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: 'RECON', subjects: ['recon.>'], storage: StorageType.File });
      const acks = new PubAcks(nc, 5_000);
      assert.equal((await acks.publish('recon.a', body, msgId('r-1'))).seq, 1);
      await server.kill('SIGKILL');
      // nats.js sees the socket close and starts reconnecting.
      for (let i = 0; i < 100 && (nc as unknown as { protocol: { connected: boolean } }).protocol.connected; i++) {
        await new Promise((r) => setTimeout(r, 20));
      }
      const started = performance.now();
      const err = await acks.publish('recon.a', body, msgId('r-2')).then(
        () => assert.fail('a publish while reconnecting was acknowledged'),
        (e: unknown) => e,
      );
      assert.ok(performance.now() - started < 1000, 'refused at once, not after the PubAck timeout');
      assert.deepEqual([classifyPublishError(err).reason, classifyPublishError(err).transport], ['connection', true]);
      await server.restart();
      for (let i = 0; i < 250 && !(nc as unknown as { protocol: { connected: boolean } }).protocol.connected; i++) {
        await new Promise((r) => setTimeout(r, 20));
      }
      await nc.flush(); // everything the client buffered is written by now
      const info = await jsm.streams.info('RECON');
      assert.equal(info.state.messages, 1, 'the refused message was not written after the reconnect');
      acks.close();
    } finally {
      await nc.close();
      await server.stop();
    }
  });

  test("relay - PubAcks listen under the connection's own inbox prefix (ferry replay and the relay alike)", async () => {
    const nc = await connect({ servers: stream.nc.getServer(), inboxPrefix: 'ferry_pubacks_test' });
    const sniffer = await connect({ servers: stream.nc.getServer() });
    try {
      const seen: string[] = [];
      sniffer.subscribe('ferry_pubacks_test.>', {
        callback: (_err, m) => {
          seen.push(m.subject);
        },
      });
      await sniffer.flush();
      const acks = new PubAcks(nc, 5_000);
      const ack = await acks.publish(`${stream.prefix}.prefixed`, body, msgId('prefix-1'));
      assert.equal(ack.stream, stream.name);
      await sniffer.flush();
      assert.equal(seen.length, 1, "the PubAck went to a reply subject under the connection's prefix");
      acks.close();
    } finally {
      await nc.close();
      await sniffer.close();
    }
  });
});
