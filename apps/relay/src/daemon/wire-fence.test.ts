import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createTestStream, TcpProxy, type TestStream, waitFor } from '@ferry/testkit';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, headers, type NatsConnection } from '@nats-io/transport-node';
import type { Logger } from '../types.js';
import { PubAcks } from './pub-acks.js';
import { FencedError, type LeaseMark, WireFence } from './wire-fence.js';

// The wire fence against the real server: a lease that goes stale between a chain's check and the
// client's buffer write sends nothing (issue 41), and the connection comes back for the lanes still held.

let stream: TestStream;
before(async () => {
  stream = await createTestStream({ prefix: 'wirefence' });
});
after(() => stream.close());

const quiet: Logger = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet } as unknown as Logger;
const body = new TextEncoder().encode('{"n":1}');

function msgId(id: string) {
  const h = headers();
  h.set('Nats-Msg-Id', id);
  return h;
}

async function storedIds(): Promise<string[]> {
  const jsm = await jetstreamManager(stream.nc);
  const info = await jsm.streams.info(stream.name);
  const ids: string[] = [];
  for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
    const m = await jsm.streams.getMessage(stream.name, { seq }).catch(() => undefined);
    const id = m?.header.get('Nats-Msg-Id');
    if (id) ids.push(id);
  }
  return ids;
}

describe('relay wire fence', () => {
  let nc: NatsConnection;
  before(async () => {
    nc = await connect({ servers: stream.nc.getServer(), reconnectTimeWait: 50, maxReconnectAttempts: -1 });
  });
  after(() => nc.close());

  test('relay - a lease gone stale after the check but before the buffer write: nothing of the buffer is written, every awaited PubAck fails as not sent, and the connection comes back', async () => {
    const held = new Map<number, string>([
      [1, '7'],
      [2, '3'],
    ]);
    const fence = new WireFence({ holds: (lane, epoch) => held.get(lane) === epoch, logger: quiet });
    const acks = new PubAcks(nc, 5_000, fence);
    try {
      // Sent and acknowledged while held: the fence lets a valid buffer through.
      const first = await acks.publish(`${stream.prefix}.a`, body, msgId('held-1'), { lane: 1, epoch: '7' });
      assert.equal(first.duplicate, false);
      // Many chains' publishes in one turn, as on a batch of PubAcks; lane 1 is lost before the microtask flush.
      const sent = Array.from({ length: 40 }, (_, i) =>
        acks.publish(`${stream.prefix}.a`, body, msgId(`stale-${i}`), { lane: i % 2 === 0 ? 1 : 2, epoch: i % 2 === 0 ? '7' : '3' }),
      );
      held.delete(1);
      const outcomes = await Promise.allSettled(sent);
      assert.ok(
        outcomes.every((o) => o.status === 'rejected' && o.reason instanceof FencedError),
        `every publish of the dropped buffer fails as not sent: ${outcomes.map((o) => (o.status === 'rejected' ? o.reason.name : 'sent')).join(',')}`,
      );
      assert.equal(fence.cuts, 1, 'the connection was reset once');
      // nats.js reconnects; lane 2, still held, sends again.
      await waitFor(() => !fence.severed && (nc as unknown as { protocol: { connected: boolean } }).protocol.connected, {
        timeoutMs: 10_000,
        what: 'the NATS connection back',
      });
      const again = await waitFor(
        () => acks.publish(`${stream.prefix}.a`, body, msgId('held-2'), { lane: 2, epoch: '3' }).catch(() => undefined),
        { timeoutMs: 10_000, what: 'a publish of a held lane after the reset' },
      );
      assert.equal(again.duplicate, false);
      const ids = await storedIds();
      assert.deepEqual(
        ids.filter((id) => id.startsWith('stale-')),
        [],
        'no message of the dropped buffer reached the stream',
      );
      assert.deepEqual(
        ids.filter((id) => id.startsWith('held-')),
        ['held-1', 'held-2'],
      );
    } finally {
      acks.close();
    }
  });

  test('relay - a lane lost while its messages await PubAcks resets the connection; a lane lost with nothing in flight does not', async () => {
    const held = new Map<number, string>([[4, '1']]);
    const fence = new WireFence({ holds: (lane, epoch) => held.get(lane) === epoch, logger: quiet });
    const acks = new PubAcks(nc, 5_000, fence);
    try {
      await waitFor(() => !fence.severed, { timeoutMs: 10_000, what: 'a connection' });
      acks.lost([4]);
      assert.equal(fence.cuts, 0, 'nothing in flight: no reset');
      const inFlight = acks.publish(`${stream.prefix}.b`, body, msgId('b-1'), { lane: 4, epoch: '1' });
      acks.lost([4]);
      assert.equal(fence.cuts, 1, 'a message of the lost lane awaited its PubAck: the connection was reset');
      await assert.rejects(inFlight, FencedError);
    } finally {
      acks.close();
    }
  });

  test('relay - a lease that ends between the check and the socket write (a pause there): the message left, and the fence reports it late with its id', async () => {
    // holds() answers true at the check before the write and false at the one after it: as if the
    // process had been stopped between the two for longer than the lease had left.
    let checks = 0;
    const late: { ids: (string | undefined)[]; reason: string }[] = [];
    const fence = new WireFence({
      holds: () => ++checks === 1,
      logger: quiet,
      onLate: (marks, reason) => late.push({ ids: marks.map((m) => m.id), reason }),
    });
    const acks = new PubAcks(nc, 5_000, fence);
    try {
      await waitFor(() => !fence.severed, { timeoutMs: 10_000, what: 'a connection' });
      const ack = await acks.publish(`${stream.prefix}.c`, body, msgId('paused-1'), { lane: 5, epoch: '2', id: 'paused-1' });
      assert.equal(ack.duplicate, false, 'the bytes left: the check before the write passed');
      assert.equal(checks, 2, 'one check before the write and one after, for the one lane');
      assert.deepEqual(late, [
        { ids: ['paused-1'], reason: 'lane 5 epoch 2 ended between the lease check and the socket write (a pause)' },
      ]);
      assert.equal(fence.late, 1);
      assert.equal(fence.cuts, 0, 'nothing to drop: the bytes had left');
    } finally {
      acks.close();
    }
  });

  test('relay - a write the kernel takes only in part (the server stopped reading): nothing more is written until it ends, and a lease lost meanwhile reports the tail late and drops what waited', async () => {
    const proxy = await TcpProxy.start({ host: '127.0.0.1', port: Number(new URL(`nats://${stream.nc.getServer()}`).port) });
    const pnc = await connect({ servers: `127.0.0.1:${proxy.port}`, reconnectTimeWait: 50, maxReconnectAttempts: -1 });
    const held = new Map<number, string>([[6, '1']]);
    const late: LeaseMark[] = [];
    const fence = new WireFence({
      holds: (lane, epoch) => held.get(lane) === epoch,
      logger: quiet,
      onLate: (marks) => late.push(...marks),
    });
    const acks = new PubAcks(pnc, 60_000, fence);
    const protocol = (pnc as unknown as { protocol: { outbound: { size(): number }; transport: { socket: { writableLength: number } } } })
      .protocol;
    const big = new Uint8Array(256 * 1024).fill(120);
    const sent: Promise<unknown>[] = [];
    try {
      await waitFor(() => !fence.severed, { timeoutMs: 10_000, what: 'a connection' });
      proxy.stall();
      // Until the kernel's buffers are full and a write stays partly in this process.
      let n = 0;
      while (protocol.transport.socket.writableLength === 0) {
        assert.ok(n < 400, `the kernel took ${n} writes of 256 KiB without a partial one`);
        const id = `tail-${n++}`;
        sent.push(acks.publish(`${stream.prefix}.d`, big, msgId(id), { lane: 6, epoch: '1', id }).catch((e: Error) => e));
        await new Promise((r) => setImmediate(r));
      }
      const partial = `tail-${n - 1}`;
      // Buffered now: it stays in the client's buffer, under the check, while the tail waits.
      const waiting = acks.publish(`${stream.prefix}.d`, body, msgId('behind-tail'), { lane: 6, epoch: '1', id: 'behind-tail' });
      await new Promise((r) => setImmediate(r));
      assert.ok(protocol.outbound.size() > 0, 'the message behind the tail was not handed to the socket');
      held.delete(6);
      proxy.heal();
      await assert.rejects(waiting, FencedError);
      await waitFor(() => late.length > 0, { timeoutMs: 30_000, what: 'the tail reported late' });
      assert.deepEqual(
        late.map((m) => m.id),
        [partial],
        'the write taken in part is the one reported: the earlier ones left whole while the lease held',
      );
      assert.equal(fence.cuts, 1, 'the buffer behind the tail was dropped and the connection reset');
      await Promise.all(sent);
      await waitFor(() => !fence.severed, { timeoutMs: 10_000, what: 'the connection back' });
      assert.ok(!(await storedIds()).includes('behind-tail'), 'the message behind the tail never left');
    } finally {
      acks.close();
      await pnc.close().catch(() => {});
      await proxy.close();
    }
  });

  test('relay - the fence refuses to install on a client without the protocol it wraps', () => {
    const fence = new WireFence({ holds: () => true, logger: quiet });
    assert.throws(() => fence.install({} as NatsConnection, () => {}), /wire fence cannot check leases where bytes leave/);
  });
});
