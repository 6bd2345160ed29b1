import { type FerryEvent, headerPairs, pgBossDb, withTransaction } from '@ferry/core';
import type { JsMsg } from '@nats-io/jetstream';
import type { PgBoss } from 'pg-boss';
import type { EarlyVersions } from './early-versions.js';
import { boundedTransaction, type CompiledInboxOptions } from './options.js';
import type { OutcomeReporter } from './outcomes.js';
import { PARK_HEARTBEAT_SECONDS, type ParkedJobData, parkKey } from './parked-job.js';
import { lockKey } from './sql/lock-key.js';
import { addParked } from './sql/park-count.js';
import { orderParked } from './sql/park-order.js';
import type { ParkReason } from './types.js';

export interface ParkingOptions {
  o: CompiledInboxOptions;
  /** The quoted schema, escaped once. */
  s: string;
  /** The quoted pg-boss schema, escaped once. */
  b: string;
  parkQueue: string;
  report: OutcomeReporter;
  early: EarlyVersions;
  /** The started pg-boss (throws before start). */
  boss: () => PgBoss;
  /** Forgets the gap bookkeeping of a stream sequence whose message was acked. */
  forget: (streamSeq: number) => void;
  /** The nak delay of a failed attempt. */
  backoffMs: (attempt: number) => number;
}

/**
 * Parks stream messages: each goes to the consumer's pg-boss queue (the
 * parking lot) as it came, with why, in one transaction with its key's parked
 * count, and is acked only then.
 */
export class Parking {
  /** What it parks with, kept as given (its parts are the inbox's, shared with the other components). */
  readonly #p: ParkingOptions;

  constructor(options: ParkingOptions) {
    this.#p = options;
  }

  /** A stream message as the parking lot (and `inbox_early`) keep it: as it came, with why. */
  messageData(m: JsMsg, event: FerryEvent | undefined, reason: ParkReason, error: string): ParkedJobData {
    const o = this.#p.o;
    const headers = headerPairs(m.headers);
    return {
      format: 1,
      consumer: o.consumer,
      mode: o.mode,
      stream: o.stream,
      streamSeq: m.info.streamSequence,
      natsSubject: m.subject,
      headers,
      body: Buffer.from(m.data).toString('base64'),
      reason,
      error,
      parkedAt: new Date().toISOString(),
      deliveries: m.info.deliveryCount,
      ...(event ? { id: event.id, key: event.key, version: event.version.toString(), type: event.type } : {}),
    };
  }

  /** Parks a stream message, then acks it; if parking fails, naks it so it comes back. */
  async parkMessage(m: JsMsg, event: FerryEvent | undefined, reason: ParkReason, error: string): Promise<void> {
    const o = this.#p.o;
    const seq = m.info.streamSequence;
    const data = this.messageData(m, event, reason, error);
    try {
      const parked = await this.#park(data, event);
      m.ack();
      this.#p.forget(seq);
      if (parked.stale) {
        // Only an event with a key can be stale.
        if (event) this.#p.report.stale(event, parked.recorded);
        return;
      }
      this.#p.report.parked({ id: event?.id, key: event?.key, reason, error, jobId: parked.jobId });
      o.logger.warn({ consumer: o.consumer, id: event?.id, key: event?.key, reason, error, jobId: parked.jobId }, 'inbox parked an event');
      // The key's stored early versions follow it into the parking lot, in order, behind it.
      if (event && o.mode === 'sequential' && reason !== 'behind-parked') {
        const behind = `key ${JSON.stringify(event.key)} has version ${event.version} parked ahead of it`;
        // The message is acked already; if this fails, the sweep moves them once they time out.
        await this.#p.early
          .flush(event.key, 'behind-parked', behind, true)
          .catch((err: unknown) =>
            o.logger.warn(
              { err, consumer: o.consumer, key: event.key },
              'inbox could not park stored early versions behind a parked event',
            ),
          );
      }
    } catch (err) {
      o.logger.error({ err, consumer: o.consumer, streamSeq: seq }, 'inbox could not park an event; it will be redelivered');
      m.nak(this.#p.backoffMs(o.backoffMs.length));
    }
  }

  /**
   * Enqueues a parked event in one transaction with its key's parked count,
   * so in `sequential` mode the key's later events park behind it. An event
   * that became stale meanwhile is not parked. In `sequential` mode the key's
   * parked events are then sorted by version (`orderParked`): a version that
   * arrives after its successors were parked goes ahead of them.
   */
  async #park(
    data: ParkedJobData,
    event: FerryEvent | undefined,
  ): Promise<{ stale: true; recorded: bigint } | { stale: false; jobId: string | null }> {
    const o = this.#p.o;
    const boss = this.#p.boss();
    return withTransaction(
      o.pool,
      async (tx) => {
        if (event && o.mode !== 'dedupe') {
          const row = await lockKey(tx, this.#p.s, o.consumer, event.key);
          if (event.version <= row.version) return { stale: true as const, recorded: row.version };
          if (o.mode === 'sequential') await addParked(tx, this.#p.s, o.consumer, event.key, 1);
        }
        const jobId = await boss.send(this.#p.parkQueue, data, {
          singletonKey: parkKey(event?.key, o.stream, data.streamSeq),
          heartbeatSeconds: PARK_HEARTBEAT_SECONDS,
          ...o.parkRetry,
          db: pgBossDb(tx),
        });
        if (event && o.mode === 'sequential')
          await orderParked(tx, this.#p.b, this.#p.parkQueue, event.key, jobId ? { added: { id: jobId, version: event.version } } : {});
        return { stale: false as const, jobId };
      },
      boundedTransaction(o),
    );
  }
}
