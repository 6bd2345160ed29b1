import { decodeEvent, type FerryEvent, headerReader } from '@ferry/core';
import type { InboxMode, ParkReason } from './types.js';

/**
 * A parked event as it sits in the consumer's pg-boss queue: the message
 * exactly as it came off the stream (headers + body), so a retry decodes it
 * through the same codec, plus why it was parked.
 */
export interface ParkedJobData {
  readonly format: 1;
  readonly consumer: string;
  readonly mode: InboxMode;
  readonly stream: string;
  readonly streamSeq: number | null;
  readonly natsSubject: string;
  readonly headers: ReadonlyArray<readonly [string, string]>;
  /** The body, base64. */
  readonly body: string;
  readonly reason: ParkReason;
  readonly error: string;
  readonly parkedAt: string;
  readonly deliveries: number;
  /** Decoded fields, when the headers decoded. */
  readonly id?: string;
  readonly key?: string;
  readonly version?: string;
  readonly type?: string;
}

/**
 * Every parked job's heartbeat: a park worker that dies (SIGKILL, lost host)
 * while it runs a job stops touching it, and pg-boss's supervisor puts the job
 * back within about this long plus its supervise interval, instead of holding
 * the key until the job expires (15 minutes). The minimum pg-boss takes.
 */
export const PARK_HEARTBEAT_SECONDS = 10;

/** The pg-boss singletonKey: the event key, or a key of its own for a message with none (it blocks nothing). */
export function parkKey(key: string | undefined, stream: string, streamSeq: number | null): string {
  return key ?? `~nokey/${stream}/${streamSeq ?? 'unknown'}/${Date.now()}`;
}

export function decodeParked(job: ParkedJobData): FerryEvent {
  // fromEntries, not `headers[name] = value`: a stored header named `__proto__` stays a header.
  const headers: Record<string, string> = Object.fromEntries(job.headers);
  return decodeEvent(headerReader(headers), Buffer.from(job.body, 'base64'), job.natsSubject, Object.keys(headers));
}

export function isParkedJobData(data: unknown): data is ParkedJobData {
  return typeof data === 'object' && data !== null && (data as { format?: unknown }).format === 1;
}
