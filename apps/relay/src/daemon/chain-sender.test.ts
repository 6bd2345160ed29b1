import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { PubAck } from '@nats-io/jetstream';
import { NoRespondersError } from '@nats-io/transport-node';
import { CircuitState, ConsecutiveBreaker, circuitBreaker, handleAll } from 'cockatiel';
import { ChainSender } from './chain-sender.js';
import type { LeasedRow } from './claim-plan.js';
import type { PubAcks } from './pub-acks.js';

/** A key's rows, versions 1…n, as a claim loads them. */
function chain(n: number): LeasedRow[] {
  return Array.from({ length: n }, (_, i) => ({
    seq: String(i + 1),
    id: `00000000-0000-4000-8000-00000000000${i}`,
    key: 'k',
    version: String(i + 1),
    lane: 0,
    epoch: '1',
    subject: 'chain.test',
    type: 'Tested',
    source: 'chain-sender-test',
    content_type: 'application/json',
    data: Buffer.from('{}'),
    data_bytes: 2,
    row_bytes: 4,
    headers: {},
    occurred_at: new Date(0),
    created_ms: 0,
    attempts: 0,
    walk_step: 0,
    due: true,
  }));
}

/** PubAcks of our own (the send path is what is tested, not NATS): records what would have been written. */
function recordingAcks(): { acks: PubAcks; sent: string[] } {
  const sent: string[] = [];
  let seq = 0;
  const acks = {
    publish: async (_subject: string, _data: Uint8Array, h: { get(name: string): string }): Promise<PubAck> => {
      sent.push(BigInt(h.get('ce-sequence')).toString()); // the wire pads versions to 20 digits
      return { stream: 'S', seq: ++seq, duplicate: false };
    },
    jetStreamAnswers: async () => true,
  } as unknown as PubAcks;
  return { acks, sent };
}

const breaker = () => circuitBreaker(handleAll, { halfOpenAfter: 1000, breaker: new ConsecutiveBreaker(5) });

test('chain sender - a lease that runs out while a row is encoded stops the chain before that row reaches the client', async () => {
  const { acks, sent } = recordingAcks();
  // holds() is asked before each row and again right before its send: true for row 1 (both checks) and
  // row 2's first check, then false, as when the lease's term ends while row 2 is being encoded.
  let checks = 0;
  const sender = new ChainSender({ breaker: breaker(), acks, maxPayload: () => 1_048_576, holds: () => ++checks <= 3 });
  const rows = chain(3);
  const outcomes = await sender.send(rows);
  assert.deepEqual(sent, ['1'], 'only the row checked right before its send went out');
  assert.equal(outcomes.size, 1, 'a row not sent has no outcome: the lane’s new holder claims it');
  assert.equal(outcomes.get(rows[0] as LeasedRow)?.ok, true);
});

test('chain sender - with the lease held, every row goes out in order, each after the previous PubAck', async () => {
  const { acks, sent } = recordingAcks();
  const sender = new ChainSender({ breaker: breaker(), acks, maxPayload: () => 1_048_576, holds: () => true });
  const outcomes = await sender.send(chain(4));
  assert.deepEqual(sent, ['1', '2', '3', '4']);
  assert.equal([...outcomes.values()].filter((o) => o.ok).length, 4);
});

/**
 * A chain's first row finding no responders, with JetStream's own API answering (`up`) or not: the
 * row's outcome, and the state of a breaker that opens on one counted failure.
 */
async function noResponders(up: boolean) {
  const acks = {
    publish: async (subject: string): Promise<PubAck> => {
      throw new NoRespondersError(subject);
    },
    jetStreamAnswers: async () => up,
  } as unknown as PubAcks;
  const b = circuitBreaker(handleAll, { halfOpenAfter: 1000, breaker: new ConsecutiveBreaker(1) });
  const rows = chain(2);
  const outcome = (await new ChainSender({ breaker: b, acks, maxPayload: () => 1_048_576, holds: () => true }).send(rows)).get(
    rows[0] as LeasedRow,
  );
  assert.ok(outcome && !outcome.ok);
  assert.equal(outcome.reason, 'no_responders');
  return { outcome, state: b.state };
}

test('chain sender - no responders while JetStream itself does not answer is the outage’s: the breaker counts it, and it kills no row', async () => {
  const { outcome, state } = await noResponders(false);
  assert.equal(outcome.outage, true, 'the row backs off but never dies of it (row-settler)');
  assert.equal(state, CircuitState.Open, 'counted by the breaker');
});

test('chain sender - no responders while JetStream answers is the subject’s: the row dies of it in the end, the breaker does not count it', async () => {
  const { outcome, state } = await noResponders(true);
  assert.equal(outcome.outage, undefined, 'counted toward the row’s death');
  assert.equal(state, CircuitState.Closed, 'not counted by the breaker');
});

test('chain sender - a row with a subject NATS reserves is refused unsent, permanent (reserved_subject), and ends its chain', async () => {
  const { acks, sent } = recordingAcks();
  const sender = new ChainSender({ breaker: breaker(), acks, maxPayload: () => 1_048_576, holds: () => true });
  for (const subject of ['$JS.API.STREAM.DELETE.VICTIM', '$SYS.REQ.SERVER.PING', '$KV.b.k', '_INBOX.x', '_R_.a', '_GR_.a.b']) {
    const rows = chain(2).map((r, i) => (i === 0 ? { ...r, subject } : r));
    const outcomes = await sender.send(rows);
    const first = outcomes.get(rows[0] as LeasedRow);
    assert.ok(first && !first.ok, subject);
    assert.equal(first.reason, 'reserved_subject', subject);
    assert.equal(first.permanent, true, subject);
    assert.equal(first.transport, false, `${subject}: not the circuit breaker's business`);
    assert.match(first.message, /is reserved by NATS.*the relay did not send it/);
    assert.equal(outcomes.size, 1, `${subject}: the key's later row is not sent`);
  }
  assert.deepEqual(sent, [], 'nothing reached the client');
});
