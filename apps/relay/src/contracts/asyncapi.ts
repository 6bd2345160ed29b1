import { JSON_CONTENT_TYPE, SEQUENCE_WIDTH, SPEC_VERSION, WIRE_HEADERS } from '@ferry/core';
import { isJsonObject, type Json, type JsonObject, setOwn } from './json-schema.js';
import type { Snapshot, SnapshotContract } from './snapshot.js';

// AsyncAPI 3.0 has no NATS message binding (its NATS binding covers operations only, a queue
// name), so the CloudEvents binding is written where every AsyncAPI tool reads it: each message's
// `headers` schema, with `const` for the headers one contract fixes (ce-type, ce-dataschema,
// ce-dataversion). The key, which orders a key's events, is named by the `x-ferry-partition-key`
// extension and in the ce-partitionkey header's description.

export interface AsyncApiOptions {
  readonly title: string;
  readonly version: string;
}

/** The extension that names the header holding an event's key (its partition key). */
export const PARTITION_KEY_EXTENSION = 'x-ferry-partition-key';

/** AsyncAPI component, channel and operation keys match `^[\w\d.\-_]+$`. */
function idOf(text: string, taken: Set<string>): string {
  const base = text.replace(/[^\w.-]/g, '_') || '_';
  let id = base;
  for (let n = 2; taken.has(id); n++) id = `${base}_${n}`;
  taken.add(id);
  return id;
}

const pointerKey = (key: string) => key.replaceAll('~', '~0').replaceAll('/', '~1');

/** A payload schema moved to `#/components/schemas/<id>`: its own references (`#`, `#/$defs/X`) follow it there. */
function rehome(node: Json, base: string, top: boolean): Json {
  if (Array.isArray(node)) return node.map((v) => rehome(v, base, false));
  if (!isJsonObject(node)) return node;
  const out: JsonObject = {};
  for (const k of Object.keys(node)) {
    if (top && k === '$schema') continue; // the AsyncAPI schema format is the document's
    const v = node[k] as Json;
    if (k === '$ref' && typeof v === 'string' && (v === '#' || v.startsWith('#/'))) setOwn(out, k, `${base}${v.slice(1)}`);
    else setOwn(out, k, rehome(v, base, false));
  }
  return out;
}

function headersOf(c: SnapshotContract): JsonObject {
  const text = (description: string, extra: JsonObject = {}): JsonObject => ({ type: 'string', description, ...extra });
  const properties: JsonObject = {};
  const put = (name: string, schema: JsonObject) => setOwn(properties, name, schema);
  put(WIRE_HEADERS.msgId, text('JetStream de-duplication id: the event id (a replay appends a suffix)'));
  put(WIRE_HEADERS.specVersion, text('CloudEvents spec version', { const: SPEC_VERSION }));
  put(WIRE_HEADERS.id, text('CloudEvents id: the event id, unique per event', { format: 'uuid' }));
  put(WIRE_HEADERS.source, text('CloudEvents source: the publishing service'));
  put(WIRE_HEADERS.type, text('CloudEvents type', { const: c.type }));
  put(WIRE_HEADERS.time, text('CloudEvents time: when the event was published', { format: 'date-time' }));
  put(
    WIRE_HEADERS.subject,
    text(`CloudEvents subject: the NATS subject${c.subject ? ` (${c.subject} unless the publisher named another)` : ''}`),
  );
  put(
    WIRE_HEADERS.partitionKey,
    text(
      "The event's key, its partition key: events of one key are delivered in the order they were published, and ce-sequence numbers them",
    ),
  );
  put(
    WIRE_HEADERS.sequence,
    text("The event's position among its key's events, zero-padded so text order is numeric order", {
      pattern: `^[0-9]{${SEQUENCE_WIDTH}}$`,
    }),
  );
  put(WIRE_HEADERS.dataschema, text('CloudEvents dataschema: the contract the data was checked against', { const: c.dataschema }));
  put(WIRE_HEADERS.dataversion, text("Ferry's CloudEvents extension: the contract version of the data", { const: String(c.version) }));
  put(WIRE_HEADERS.contentType, text('The media type of the body', { const: JSON_CONTENT_TYPE }));
  put('traceparent', text('W3C trace context, when the publisher was traced'));
  put('tracestate', text('W3C trace context, when the publisher was traced'));
  const required: Json[] = Object.values(WIRE_HEADERS);
  return { type: 'object', properties, required };
}

/** An AsyncAPI 3.0.0 document of the contracts: a channel per subject, a message per type and version, a send operation per channel. */
export function buildAsyncApi(snapshot: Snapshot, options: AsyncApiOptions): JsonObject {
  const channels: JsonObject = {};
  const operations: JsonObject = {};
  const messages: JsonObject = {};
  const schemas: JsonObject = {};
  const channelIds = new Set<string>();
  const messageIds = new Set<string>();
  // Contracts without a subject go to one channel per type, with no fixed address.
  const byChannel = new Map<string, { id: string; address: string | null; type?: string; refs: JsonObject }>();
  for (const c of snapshot.contracts) {
    const channelKey = c.subject !== null ? `s:${c.subject}` : `t:${c.type}`;
    let channel = byChannel.get(channelKey);
    if (!channel) {
      channel =
        c.subject !== null
          ? { id: idOf(c.subject, channelIds), address: c.subject, refs: {} }
          : { id: idOf(c.type, channelIds), address: null, type: c.type, refs: {} };
      byChannel.set(channelKey, channel);
    }
    const id = idOf(`${c.type}.v${c.version}`, messageIds);
    setOwn(schemas, id, rehome(c.jsonSchema, `#/components/schemas/${pointerKey(id)}`, true));
    const message: JsonObject = {
      name: `${c.type}.v${c.version}`,
      title: `${c.type} v${c.version}`,
      ...(c.description !== null ? { summary: c.description } : {}),
      contentType: JSON_CONTENT_TYPE,
      headers: headersOf(c),
      payload: { $ref: `#/components/schemas/${pointerKey(id)}` },
    };
    setOwn(message, PARTITION_KEY_EXTENSION, WIRE_HEADERS.partitionKey);
    setOwn(messages, id, message);
    setOwn(channel.refs, id, { $ref: `#/components/messages/${pointerKey(id)}` });
  }
  for (const ch of byChannel.values()) {
    setOwn(channels, ch.id, {
      address: ch.address,
      ...(ch.type !== undefined ? { description: `${ch.type} events: the subject is the one each publish names` } : {}),
      messages: ch.refs,
    });
    setOwn(operations, `${ch.id}.send`, {
      action: 'send',
      channel: { $ref: `#/channels/${pointerKey(ch.id)}` },
      messages: Object.keys(ch.refs).map((m) => ({ $ref: `#/channels/${pointerKey(ch.id)}/messages/${pointerKey(m)}` })),
    });
  }
  return {
    asyncapi: '3.0.0',
    info: {
      title: options.title,
      version: options.version,
      description:
        `Events published through Ferry's outbox to NATS JetStream, as CloudEvents 1.0 in binary mode: the data is the body (JSON), ` +
        `the attributes are ce-* headers. Each message is one event type at one contract version; a consumer upcasts older versions. ` +
        `Events of one key (header ${WIRE_HEADERS.partitionKey}, the partition key) arrive in order.`,
    },
    defaultContentType: JSON_CONTENT_TYPE,
    channels,
    operations,
    components: { schemas, messages },
  };
}
