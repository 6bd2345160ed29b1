/**
 * The `Nats-Msg-Id` of a copy that `ferry replay` sends: the event id, then
 * `:replay:` and the run's start time, so the stream stores the copy even
 * inside its duplicate window. It is longer than the event id the relay
 * sends, so every size check that must hold for a replay too (the
 * publisher's) counts these extra bytes: an event the publisher accepts can
 * always be replayed.
 */
export function replayMsgIdSuffix(runStartedAt: Date): string {
  return `:replay:${runStartedAt.toISOString()}`;
}

/** Bytes a replay message id adds to the event id (`:replay:` + a 24-character ISO time). */
export const REPLAY_MSG_ID_EXTRA_BYTES = ':replay:'.length + '2026-01-01T00:00:00.000Z'.length;
