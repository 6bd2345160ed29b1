// Stopping a pull consumer without stranding a message.
//
// nats.js's `ConsumerMessages.stop()` unsubscribes its pull inbox at once,
// while the server still holds the consumer's open pull request: for a moment
// it goes on filling that request, and what it sends then reaches nobody
// (measured: 1-7 messages per stop under load, with nats-server 2.9, even
// with a second subscription on the same inbox kept across the UNSUB). Such a
// message counts as delivered and stays ack-pending until `ack_wait` (30 s by
// default) — at every restart, on whichever keys were unlucky (issue 29:
// `num_ack_pending 1` after `await inbox.stop(); await nc.drain()`). Nak'ing is
// no remedy either: the server hands a nak'ed message straight back to the
// same open request.
//
// So stop() lets the open pull requests end instead of cutting them: nats.js
// stops asking for more (it behaves as a fetch does) and ends its iterator by
// itself once the server has filled or expired every open request; what still
// arrives meanwhile goes the normal way (applied and acked). Bounded by the
// requests' expiry and a margin; past it, the iterator is stopped as before.
import type { ConsumerMessages } from '@nats-io/jetstream';

/** What nats.js keeps about its pull requests; not in its typings, so read defensively. */
interface PullInternals {
  isConsume?: unknown;
  pending?: { requests?: unknown };
  stop?: unknown;
}

export type IntakeEnd = 'requests-ended' | 'bound' | 'cut';

/**
 * Ends intake without dropping a delivery: no more pull requests; the
 * iterator of `messages` ends by itself when the open ones are filled or
 * expired (`loop` resolves), at most `boundMs`, after which it is stopped.
 * Resolves how it ended: `cut` when nats.js's internals were not as expected
 * and the iterator was stopped at once (the old behaviour).
 */
export async function endIntake(messages: ConsumerMessages, loop: Promise<void>, boundMs: number): Promise<IntakeEnd> {
  const m = messages as unknown as PullInternals;
  if (typeof m.isConsume !== 'boolean' || typeof m.pending?.requests !== 'number' || typeof m.stop !== 'function') {
    messages.stop();
    return 'cut';
  }
  // As a fetch: no refill, and the iterator stops itself when pending.requests reaches 0.
  m.isConsume = false;
  if (m.pending.requests <= 0) messages.stop();
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<'bound'>((resolve) => {
    timer = setTimeout(() => resolve('bound'), boundMs);
  });
  try {
    const ended = await Promise.race([loop.then(() => 'requests-ended' as const), bound]);
    if (ended === 'bound') messages.stop();
    return ended;
  } finally {
    clearTimeout(timer);
  }
}
