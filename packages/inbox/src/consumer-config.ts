import { ConfigError } from '@ferry/core';
import {
  AckPolicy,
  type ConsumerConfig,
  type ConsumerInfo,
  DeliverPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  jetstreamManager,
} from '@nats-io/jetstream';
import { ConsumerMismatchError } from './errors.js';
import type { CompiledInboxOptions } from './options.js';
import { errorText } from './outcomes.js';

const NANOS_PER_MS = 1_000_000;

/**
 * What an inbox needs of its durable JetStream consumer, for
 * {@link consumerConfigDifferences}. A field left `undefined` is not checked
 * (`ferry doctor` knows an inbox's `maxDeliver`, not its `ackWaitMs`).
 */
export interface InboxConsumerNeeds {
  /** The inbox's `maxDeliver`: the server's `max_deliver` must be -1 or above it, so the inbox parks before the server gives up. */
  maxDeliver: number;
  /** The inbox's `ackWaitMs`; `ack_wait` must equal it. */
  ackWaitMs?: number;
  /** The inbox's one filter subject, `null` for the whole stream; `filter_subject` must equal it. */
  filterSubject?: string | null;
  /** The inbox's `maxAckPending`; checked only when `strict`. */
  maxAckPending?: number;
}

/**
 * How a consumer's config differs from what an inbox needs, one phrase per
 * difference (`has ack_policy "none", need "explicit"`); empty when it fits.
 * Without `strict`, only what would break the inbox: explicit acks, a pull
 * consumer, the filter, `ack_wait`, and a `max_deliver` above `maxDeliver`.
 * `strict` also wants the inbox's own `max_ack_pending` and `max_deliver`
 * -1 (what `createInbox` sets when it manages the consumer).
 *
 * @example
 * const info = await jsm.consumers.info('ORDERS', 'billing');
 * consumerConfigDifferences(info.config, { maxDeliver: 5 }); // [] when an inbox can use it
 */
export function consumerConfigDifferences(
  c: Pick<ConsumerConfig, 'ack_policy' | 'ack_wait' | 'max_deliver' | 'max_ack_pending'> & {
    deliver_subject?: string;
    filter_subject?: string;
  },
  o: InboxConsumerNeeds,
  strict = false,
): string[] {
  const out: string[] = [];
  if (c.ack_policy !== AckPolicy.Explicit) out.push(`has ack_policy ${JSON.stringify(c.ack_policy)}, need "explicit"`);
  if (c.deliver_subject) out.push(`is a push consumer (deliver_subject ${JSON.stringify(c.deliver_subject)}), need a pull consumer`);
  const filter = c.filter_subject ?? undefined;
  if (o.filterSubject !== undefined && (o.filterSubject ?? '') !== (filter ?? '')) {
    out.push(`has filter_subject ${JSON.stringify(filter ?? null)}, need ${JSON.stringify(o.filterSubject ?? null)}`);
  }
  if (o.ackWaitMs !== undefined && c.ack_wait !== o.ackWaitMs * NANOS_PER_MS) {
    out.push(`has ack_wait ${(c.ack_wait ?? 0) / NANOS_PER_MS} ms, need ${o.ackWaitMs} ms`);
  }
  if (c.max_deliver !== undefined && c.max_deliver !== -1 && c.max_deliver <= o.maxDeliver) {
    out.push(`has max_deliver ${c.max_deliver}, need -1 or more than maxDeliver (${o.maxDeliver}) so the inbox can park`);
  }
  if (strict && c.max_ack_pending !== o.maxAckPending) out.push(`has max_ack_pending ${c.max_ack_pending}, need ${o.maxAckPending}`);
  if (strict && c.max_deliver !== -1) out.push(`has max_deliver ${c.max_deliver}, need -1`);
  return out;
}

/** The consumer config `createInbox` creates (or updates to) when it manages the consumer. */
function desiredConfig(o: CompiledInboxOptions): Partial<ConsumerConfig> {
  return {
    durable_name: o.consumer,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: o.ackWaitMs * NANOS_PER_MS,
    // Ferry counts deliveries and parks at maxDeliver itself; a server-side limit would drop a
    // message silently when parking it failed (database down), so the server never gives up.
    max_deliver: -1,
    max_ack_pending: o.maxAckPending,
    ...(o.filterSubject === undefined ? {} : { filter_subject: o.filterSubject }),
  };
}

function differences(info: ConsumerInfo, o: CompiledInboxOptions, strict: boolean): string[] {
  const needs = {
    maxDeliver: o.maxDeliver,
    ackWaitMs: o.ackWaitMs,
    filterSubject: o.filterSubject ?? null,
    maxAckPending: o.maxAckPending,
  };
  return consumerConfigDifferences(info.config, needs, strict);
}

/**
 * Makes sure the inbox's durable consumer exists and fits: creates or updates
 * it with `manageConsumer`, otherwise refuses one that is missing or unfit
 * (`ConsumerMismatchError`). A missing stream is a `ConfigError`.
 */
export async function ensureConsumer(o: CompiledInboxOptions): Promise<void> {
  const jsm = await jetstreamManager(o.nc);
  const notFound = (err: unknown, code: number) => err instanceof JetStreamApiError && err.code === code;
  let info: ConsumerInfo | undefined;
  try {
    info = await jsm.consumers.info(o.stream, o.consumer);
  } catch (err) {
    if (notFound(err, JetStreamApiCodes.StreamNotFound)) {
      throw new ConfigError(
        'stream',
        `JetStream stream ${JSON.stringify(o.stream)} does not exist; create it first (or run ferry doctor)`,
        {
          cause: err,
        },
      );
    }
    if (!notFound(err, JetStreamApiCodes.ConsumerNotFound)) throw err;
  }
  if (!o.manageConsumer) {
    if (!info) throw new ConsumerMismatchError(o.stream, o.consumer, ['does not exist']);
    const diffs = differences(info, o, false);
    if (diffs.length > 0) throw new ConsumerMismatchError(o.stream, o.consumer, diffs);
    return;
  }
  const config = desiredConfig(o);
  if (!info) {
    try {
      await jsm.consumers.add(o.stream, config);
      return;
    } catch (err) {
      // Another instance may have created it at the same moment with another config: fall through to update.
      info = await jsm.consumers.info(o.stream, o.consumer).catch(() => {
        throw err;
      });
    }
  }
  if (differences(info, o, true).length > 0) {
    const { durable_name: _name, deliver_policy: _policy, ...update } = config;
    try {
      await jsm.consumers.update(o.stream, o.consumer, update);
    } catch (err) {
      throw new ConsumerMismatchError(
        o.stream,
        o.consumer,
        [...differences(info, o, true), `and could not be updated (${errorText(err)})`],
        {
          cause: err,
        },
      );
    }
  }
}
