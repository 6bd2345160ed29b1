import { ensureSubjectCommand } from '../actions/subject-streams.js';
import type { Classified } from '../errors.js';

/**
 * The `last_error` a failed row records: its reason, then what happened in
 * words that name the cause and the fix where the relay knows them. No
 * responders on a publish means no stream binds the row's subject (or
 * JetStream is down): nats.js says only "no responders: 'x.payments'".
 */
export function failureText(outcome: Pick<Classified, 'reason' | 'message'>, subject: string): string {
  if (outcome.reason === 'no_responders') {
    return `no_responders: no stream binds subject ${subject}; add it to a stream (${ensureSubjectCommand(subject)}) or discard the event (ferry dlq discard); if every subject fails so, JetStream is down`;
  }
  return `${outcome.reason}: ${outcome.message}`;
}
