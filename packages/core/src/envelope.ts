/**
 * Event type → payload type, the map a typed publisher or inbox takes
 * (`createPublisher<OrderEvents>()`, `createInbox<OrderEvents>()`); the
 * default allows any type with an `unknown` payload.
 *
 * @example
 * type OrderEvents = { OrderPlaced: { orderId: string; total: number }; OrderCancelled: { orderId: string } };
 */
export type EventMap = Record<string, unknown>;

/** The event Ferry carries, as the relay reads it from the outbox and the inbox decodes it from the stream. */
export interface FerryEvent {
  /** Event id (UUID). Also the JetStream `Nats-Msg-Id`, so a re-send is dropped. */
  readonly id: string;
  /** Partition / aggregate key. Order is kept per key. */
  readonly key: string;
  /** Per-key version, 1, 2, 3… in commit order. */
  readonly version: bigint;
  /** NATS subject the event is published on. */
  readonly subject: string;
  /** Event type, e.g. `OrderPlaced`. */
  readonly type: string;
  /** Producing service, the CloudEvents `source`. */
  readonly source: string;
  /** When the event occurred. */
  readonly time: Date;
  /** MIME type of `data`, e.g. `application/json`. */
  readonly contentType: string;
  /** The payload bytes exactly as they travel. */
  readonly data: Uint8Array;
  /** Extra headers: user headers plus `traceparent`/`tracestate` when present. */
  readonly headers: Readonly<Record<string, string>>;
}

/** The JSON content type Ferry uses when the caller passes a value rather than bytes. */
export const JSON_CONTENT_TYPE = 'application/json';

/** An outbox row as node-postgres returns it (`version` as text or bigint). */
export interface OutboxEventRow {
  id: string;
  key: string;
  version: string | bigint;
  subject: string;
  type: string;
  source: string;
  content_type: string;
  data: Uint8Array;
  headers: Record<string, string> | null;
  occurred_at: Date;
}

/** The event an outbox row holds: what the relay, `ferry replay` and `ferry doctor` encode. */
export function eventFromOutboxRow(row: OutboxEventRow): FerryEvent {
  return {
    id: row.id,
    key: row.key,
    version: BigInt(row.version),
    subject: row.subject,
    type: row.type,
    source: row.source,
    time: row.occurred_at,
    contentType: row.content_type,
    data: row.data,
    headers: row.headers ?? {},
  };
}
