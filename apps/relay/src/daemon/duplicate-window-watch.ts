import { type JetStreamManager, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { type TakeoverSpanOptions, takeoverWindowShortfall } from '../duplicate-window.js';
import type { Logger } from '../types.js';

/** Subjects remembered, at most: a schema with more distinct subjects is checked for its first ones only. */
const MAX_SUBJECTS = 10_000;

export interface DuplicateWindowWatchOptions extends TakeoverSpanOptions {
  nc: NatsConnection;
  logger: Logger;
}

/**
 * Warns when a stream the relay sends to keeps duplicates for less than a
 * takeover's re-send span (`takeoverWindowShortfall`): once per stream when
 * the relay first sends to it (at start, the first claim's subjects), and
 * again on every takeover, which is when those copies happen. The lookups
 * (`$JS.API.STREAM.NAMES` by subject, `$JS.API.STREAM.INFO`) run off the send
 * path, one at a time; a server that refuses them (permissions) only turns
 * the check off, with one debug line.
 */
export class DuplicateWindowWatch {
  readonly #o: DuplicateWindowWatchOptions;
  readonly #subjects = new Set<string>();
  /** Streams looked up, with their shortfall message (undefined: the window covers the span). */
  readonly #streams = new Map<string, string | undefined>();
  readonly #queue: string[] = [];
  #jsm: Promise<JetStreamManager> | undefined;
  #running = false;
  #off = false;
  #warnedAt = Number.NEGATIVE_INFINITY;

  constructor(options: DuplicateWindowWatchOptions) {
    this.#o = options;
  }

  /** A subject about to be sent: the stream of a new one is looked up in the background. */
  saw(subject: string): void {
    if (this.#off || this.#subjects.has(subject) || this.#subjects.size >= MAX_SUBJECTS) return;
    this.#subjects.add(subject);
    this.#queue.push(subject);
    if (!this.#running) void this.#drain();
  }

  /** A lane was taken over: the short streams known are named again, since their copies happen now. */
  takeover(): void {
    // One take statement reports each lane it took: name each stream once for it.
    if (performance.now() - this.#warnedAt < 1_000) return;
    this.#warnedAt = performance.now();
    for (const [stream, message] of this.#streams) if (message !== undefined) this.#warn(stream, message, 'takeover');
  }

  async #drain(): Promise<void> {
    this.#running = true;
    try {
      this.#jsm ??= jetstreamManager(this.#o.nc, { timeout: this.#o.publishTimeoutMs });
      const jsm = await this.#jsm;
      for (let subject = this.#queue.shift(); subject !== undefined; subject = this.#queue.shift()) {
        let stream: string;
        try {
          stream = await jsm.streams.find(subject);
        } catch {
          continue; // no stream binds it: the relay reports that on the row itself
        }
        if (this.#streams.has(stream)) continue;
        const info = await jsm.streams.info(stream);
        const short = takeoverWindowShortfall(stream, info.config.duplicate_window, this.#o);
        this.#streams.set(stream, short ? `${short.message}; fix: ${short.fix}` : undefined);
        if (short) this.#warn(stream, `${short.message}; fix: ${short.fix}`, 'start');
      }
    } catch (err) {
      this.#off = true;
      this.#queue.length = 0;
      this.#o.logger.debug({ err }, 'duplicate window check off: the streams could not be looked up');
    } finally {
      this.#running = false;
    }
  }

  #warn(stream: string, message: string, when: 'start' | 'takeover'): void {
    this.#o.logger.warn({ event: 'duplicate-window-short', stream, when }, `stream ${stream}: ${message}`);
  }
}
