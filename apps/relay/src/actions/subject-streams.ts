import type { JetStreamManager } from '@nats-io/jetstream';
import { shellQuote } from '../shell-quote.js';

/** Which stream binds each subject now, or null when none does: the server's own answer ($JS.API.STREAM.NAMES, filtered by subject). */
export async function streamsBinding(jsm: JetStreamManager, subjects: Iterable<string>): Promise<Map<string, string | null>> {
  const out = new Map<string, string | null>();
  for (const subject of subjects) {
    if (out.has(subject)) continue;
    // Not jsm.streams.find(): it throws alike for "no stream" and for a server that did not answer,
    // and only the first is an answer. Subjects of two streams cannot overlap, so one name at most.
    let stream: string | null = null;
    for await (const name of jsm.streams.names(subject)) stream ??= name;
    out.set(subject, stream);
  }
  return out;
}

/** The command that binds `subject` to a stream (an existing one gains it; none is removed), quoted to paste. */
export function ensureSubjectCommand(subject: string, stream = 'STREAM'): string {
  return `ferry streams ensure ${shellQuote(`${stream}=${subject}`)}`;
}

/** What to do about a subject no stream binds (dlq retry --dry-run; the relay's own failure says no_responders). */
export function bindSubjectFix(subject: string): string {
  return `add it to a stream: ${ensureSubjectCommand(subject)} (STREAM: an existing stream gains it, or a new one is created; ferry streams ls lists them)`;
}
