import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createTestStream, type TestStream, waitFor } from '@ferry/testkit';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, headers, type NatsConnection } from '@nats-io/transport-node';
import type { Logger } from '../types.js';
import { PubAcks } from './pub-acks.js';
import { FencedError, WireFence } from './wire-fence.js';

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

  test('relay - the fence refuses to install on a client without the protocol it wraps', () => {
    const fence = new WireFence({ holds: () => true, logger: quiet });
    assert.throws(() => fence.install({} as NatsConnection, () => {}), /wire fence cannot check leases where bytes leave/);
  });
});
