import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { isValidationError } from '@ferry/inbox';
import { waitFor } from '@ferry/testkit';
import { Registry } from 'prom-client';
import { EFFECT_SQL, ferryEvent, type InboxFixture, inboxFixture, publishEvents } from './inbox-support.js';

/** The value of one series in the registry's text output, or `undefined` when it is not there. */
async function value(registry: Registry, series: string): Promise<number | undefined> {
  const text = await registry.metrics();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe('inbox metrics', () => {
  let f: InboxFixture;
  after(async () => f?.close());

  test('inbox metrics - outcomes, durations, parked reasons, in-flight and the sampled consumer lag reach the registry', async () => {
    f = await inboxFixture();
    const registry = new Registry();
    const sql = EFFECT_SQL(f.s);
    let open!: () => void;
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    const inbox = f.inbox({
      metrics: registry,
      lagSampleIntervalMs: 100,
      handlers: {
        Set: async (event, { tx }) => {
          await gate;
          await tx.query(sql.effect, [event.key, event.version.toString()]);
        },
      },
    });
    // 20 events wait for the inbox: consumed at once, held by the handler until the gate opens.
    const events = Array.from({ length: 20 }, (_, i) => ferryEvent(f.stream.prefix, { key: `k${i}`, version: 2 }));
    await publishEvents(f.stream.nc, events);
    await inbox.start();
    const c = 'consumer="billing"';
    await waitFor(
      async () =>
        ((await value(registry, `ferry_inbox_consumer_ack_pending{${c}}`)) ?? 0) +
          ((await value(registry, `ferry_inbox_consumer_pending{${c}}`)) ?? 0) ===
        20,
      { timeoutMs: 10_000, what: 'the lag sample to count the 20 waiting messages' },
    );
    // NATS counts them as soon as they are waiting; the inbox holds them once delivered to its handler.
    await waitFor(async () => ((await value(registry, `ferry_inbox_in_flight{${c}}`)) ?? 0) > 0, {
      timeoutMs: 10_000,
      what: 'held messages in flight',
    });
    open();
    await waitFor(() => inbox.counts().applied === 20, { timeoutMs: 10_000, what: 'the 20 events to apply' });

    // A duplicate (the same event under another message id), a stale version, and an event nobody handles.
    await publishEvents(f.stream.nc, [events[0] as (typeof events)[number]], { msgIdSuffix: 'again' });
    await publishEvents(f.stream.nc, [ferryEvent(f.stream.prefix, { key: 'k1', version: 1 })]);
    await publishEvents(f.stream.nc, [ferryEvent(f.stream.prefix, { key: 'k-unknown', version: 1, type: 'Nobody' })]);
    await waitFor(() => inbox.counts().duplicate === 1 && inbox.counts().stale === 1 && inbox.counts().parked === 1, {
      timeoutMs: 10_000,
      what: 'the duplicate, stale and parked outcomes',
    });
    await waitFor(
      async () =>
        (await value(registry, `ferry_inbox_consumer_pending{${c}}`)) === 0 &&
        (await value(registry, `ferry_inbox_consumer_ack_pending{${c}}`)) === 0,
      { timeoutMs: 10_000, what: 'the lag to fall to zero' },
    );

    assert.equal(await value(registry, `ferry_inbox_messages_total{${c},outcome="applied"}`), 20);
    assert.equal(await value(registry, `ferry_inbox_messages_total{${c},outcome="duplicate"}`), 1);
    assert.equal(await value(registry, `ferry_inbox_messages_total{${c},outcome="stale"}`), 1);
    assert.equal(await value(registry, `ferry_inbox_messages_total{${c},outcome="parked"}`), 1);
    assert.equal(await value(registry, `ferry_inbox_messages_total{${c},outcome="failed"}`), 0, 'every outcome is exported from the start');
    assert.equal(await value(registry, `ferry_inbox_parked_total{${c},reason="unknown-type"}`), 1);
    assert.equal(await value(registry, `ferry_inbox_parked_total{${c},reason="handler-failed"}`), 0);
    assert.equal(
      await value(registry, `ferry_inbox_handler_duration_seconds_count{${c}}`),
      20,
      'one handler observation per applied message',
    );
    assert.equal(await value(registry, `ferry_inbox_gate_to_commit_seconds_count{${c}}`), 20);
    const handlerSum = (await value(registry, `ferry_inbox_handler_duration_seconds_sum{${c}}`)) ?? 0;
    const gateSum = (await value(registry, `ferry_inbox_gate_to_commit_seconds_sum{${c}}`)) ?? 0;
    assert.ok(gateSum >= handlerSum && handlerSum > 0, `gate-to-commit (${gateSum}) holds the handler (${handlerSum})`);
    // Read at scrape time: the last message's task ends just after its ack.
    await waitFor(async () => (await value(registry, `ferry_inbox_in_flight{${c}}`)) === 0, {
      timeoutMs: 5_000,
      what: 'in flight to be 0',
    });
    const text = await registry.metrics();
    assert.doesNotMatch(text, /key=|id=|type=/, 'no unbounded label');

    // A second consumer shares the registry; a stopped inbox stops reporting lag.
    const audit = f.inbox({ consumer: 'audit', metrics: registry, lagSampleIntervalMs: 100, handlers: { Set: async () => {} } });
    await audit.start();
    await waitFor(async () => (await value(registry, 'ferry_inbox_messages_total{consumer="audit",outcome="applied"}')) === 20, {
      timeoutMs: 10_000,
      what: 'the second consumer to apply the 20 events',
    });
    await inbox.stop();
    assert.equal(await value(registry, `ferry_inbox_consumer_pending{${c}}`), undefined, 'a stopped inbox drops its lag series');
    assert.equal(await value(registry, `ferry_inbox_messages_total{${c},outcome="applied"}`), 20, 'its counters stay');
    await audit.stop();
  });

  test('inbox metrics - a metrics option that is not a prom-client registry is refused at construction', async () => {
    f ??= await inboxFixture();
    assert.throws(
      () => f.inbox({ metrics: {} as unknown as Registry, handlers: {} }),
      (err: unknown) => isValidationError(err) && /metrics must be a prom-client Registry/.test((err as Error).message),
    );
  });
});
