/** One copy `ferry replay` could not send. */
export interface ReplayFailure {
  seq: string;
  id: string;
  key: string;
  error: string;
}

/** What the resume commands need from a run: its filters, and what it sent. */
export interface ResumeInput {
  since?: Date;
  until?: Date;
  subjectPrefix?: string;
  key?: string;
  keepGoing?: boolean;
  /** The run's last selected seq (its upper bound). */
  lastSeq: string | null;
  /** Every failure, in seq order. */
  failures: readonly ReplayFailure[];
}

export { shellQuote } from '../actions/shell-quote.js';

/**
 * The replay commands that send exactly the selected rows not yet sent (the
 * run's filters, narrowed): rows are sent in seq order and a key's next row
 * only after its previous one is acknowledged, so after a failure the unsent
 * rows are the failed keys' rows from their failure on, plus (when the run
 * stopped) every row after the last one sent.
 */
export function resumeCommands(run: ResumeInput, lastAttempted: bigint, maxAcked: bigint | null): string[][] {
  const first = run.failures[0];
  if (!first || run.lastSeq === null) return [];
  const filters: string[] = [];
  if (run.since) filters.push('--since', run.since.toISOString());
  if (run.until) filters.push('--until', run.until.toISOString());
  if (run.subjectPrefix !== undefined) filters.push('--subject-prefix', run.subjectPrefix);
  const end = BigInt(run.lastSeq);
  const perKey = (upTo: bigint) => {
    const firstOfKey = new Map<string, string>();
    for (const f of run.failures) if (!firstOfKey.has(f.key)) firstOfKey.set(f.key, f.seq);
    return [...firstOfKey].map(([key, seq]) => [...filters, '--key', key, '--from-seq', seq, '--to-seq', upTo.toString()]);
  };
  const withKey = run.key !== undefined ? ['--key', run.key] : [];
  if (run.keepGoing) return perKey(end);
  if (maxAcked === null || maxAcked < BigInt(first.seq)) {
    // Nothing after the first failure went through: resume from it.
    return [[...filters, ...withKey, '--from-seq', first.seq, '--to-seq', end.toString()]];
  }
  const out = perKey(lastAttempted);
  if (lastAttempted < end) out.push([...filters, ...withKey, '--from-seq', (lastAttempted + 1n).toString(), '--to-seq', end.toString()]);
  return out;
}
