// ferry doctor's NATS checks: JetStream, the outbox subjects' streams, each stream's duplicate
// window and replicas, inbox consumers, and max_payload against the largest event.
import { encodedSize, encodeEvent, eventFromOutboxRow, quoteIdentifier, reservedSubjectToken } from '@ferry/core';
import { consumerConfigDifferences } from '@ferry/inbox';
import { type JetStreamManager, jetstreamManager, type StreamInfo } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type pg from 'pg';
import { ensureSubjectCommand } from '../actions/subject-streams.js';
import { CLI_DEFAULTS } from '../cli/defaults.js';
import { count } from '../count.js';
import { duplicateWindowShortfall, takeoverWindowShortfall } from '../duplicate-window.js';
import { formatDuration } from '../duration.js';
import { retrySpanMs } from '../relay-options.js';
import { largestEventSql } from '../sql/largest-event.js';
import type { BoundedOutboxEventRow } from '../sql/outbox-event-columns.js';
import type { Add, DoctorFlags } from './doctor-report.js';

const fmtMs = (ms: number) => formatDuration(ms, true);

export async function checkNats(
  nc: NatsConnection,
  pool: pg.Pool,
  subjects: Map<string, number> | undefined,
  flags: DoctorFlags,
  add: Add,
): Promise<void> {
  let jsm: JetStreamManager;
  try {
    jsm = await jetstreamManager(nc, { timeout: CLI_DEFAULTS.connectTimeoutMs });
    await jsm.getAccountInfo();
  } catch (err) {
    add(
      'nats',
      'problem',
      `JetStream is not available: ${(err as Error).message}`,
      'enable JetStream on the server (nats-server -js, or jetstream {} in its config)',
    );
    return;
  }
  const streams = new Set<string>(flags.stream ?? []);
  if (subjects === undefined) add('subjects', 'skipped', 'the outbox could not be read');
  else if (subjects.size === 0) add('subjects', 'ok', 'the outbox holds no events yet');
  else {
    const missing: string[] = [];
    const reserved: string[] = [];
    for (const [subject, n] of subjects) {
      // Not looked up: $KV.b.k is in a stream (KV_b), and the relay never sends it anyway.
      if (reservedSubjectToken(subject) !== undefined) {
        reserved.push(`${subject} (${count(n, 'event')})`);
        continue;
      }
      try {
        streams.add(await jsm.streams.find(subject));
      } catch {
        missing.push(`${subject} (${count(n, 'event')})`);
      }
    }
    if (missing.length > 0) {
      add(
        'subjects',
        'problem',
        `${missing.length} outbox subjects are in no stream: ${missing.slice(0, 5).join(', ')}${missing.length > 5 ? ', …' : ''}`,
        `add them to a stream: ${ensureSubjectCommand(
          missing
            .map((m) => m.split(' (')[0])
            .slice(0, 5)
            .join(','),
        )}${missing.length > 5 ? ',…' : ''} (an existing stream gains them; ferry streams ls lists the streams)`,
      );
    } else if (reserved.length < subjects.size)
      add('subjects', 'ok', `all ${subjects.size - reserved.length} outbox subjects are in a stream (${[...streams].join(', ')})`);
    if (reserved.length > 0) {
      add(
        'reserved subjects',
        'problem',
        `${reserved.length} outbox subjects are reserved by NATS (the relay never sends them; a pending event goes dead): ${reserved.slice(0, 5).join(', ')}${reserved.length > 5 ? ', …' : ''}`,
        'ferry dlq list shows them (reason reserved_subject); discard them (ferry dlq discard) and find who stored them: the publish functions refuse such subjects since outbox migration 000016',
      );
    }
  }
  const span = retrySpanMs(flags);
  for (const name of streams) {
    let info: StreamInfo;
    try {
      info = await jsm.streams.info(name);
    } catch (err) {
      add(
        `stream ${name}`,
        'problem',
        `does not exist or cannot be read: ${(err as Error).message}`,
        `create it: ferry streams ensure ${name}=<subjects>`,
      );
      continue;
    }
    const short = duplicateWindowShortfall(name, info.config.duplicate_window, flags);
    if (short) add(`stream ${name}`, 'problem', short.message, short.fix);
    const takeover = takeoverWindowShortfall(name, info.config.duplicate_window, flags);
    if (takeover) add(`stream ${name}`, 'problem', takeover.message, takeover.fix);
    else {
      const windowMs = Math.round(info.config.duplicate_window / 1e6);
      add(`stream ${name}`, 'ok', `duplicate window ${fmtMs(windowMs)} covers the retry span ${fmtMs(span)}`);
    }
    if (info.config.num_replicas < 3) {
      add(
        `stream ${name}`,
        'warning',
        `${info.config.num_replicas} replica(s), ${info.config.storage} storage: a lost server loses acknowledged events`,
        `in production use a 3-node cluster, then: ferry streams ensure ${name} --replicas 3 (file storage)`,
      );
    }
    for (const consumer of flags.consumer ?? []) await checkConsumer(jsm, name, consumer, flags, add);
  }
  if ((flags.consumer ?? []).length > 0 && streams.size === 0) {
    add('consumer', 'skipped', 'no stream to look in', 'pass --stream NAME');
  }
  await checkPayload(nc, pool, subjects !== undefined, flags, add);
}

async function checkConsumer(jsm: JetStreamManager, stream: string, name: string, flags: DoctorFlags, add: Add): Promise<void> {
  const check = `consumer ${stream}/${name}`;
  let c: Awaited<ReturnType<JetStreamManager['consumers']['info']>>;
  try {
    c = await jsm.consumers.info(stream, name);
  } catch (err) {
    add(
      check,
      'problem',
      `not found: ${(err as Error).message}`,
      'start the inbox once (createInbox creates its durable consumer), or check --stream and --consumer',
    );
    return;
  }
  const cfg = c.config;
  // The inbox's own check (what createInbox refuses), for what doctor knows of the inbox: its maxDeliver.
  const bad = consumerConfigDifferences(cfg, { maxDeliver: flags.inboxMaxDeliver });
  const ackWaitMs = Math.round((cfg.ack_wait ?? 0) / 1e6);
  const summary = `ack_wait ${fmtMs(ackWaitMs)}, max_deliver ${cfg.max_deliver ?? -1}, max_ack_pending ${cfg.max_ack_pending ?? '?'}, filter ${cfg.filter_subject ?? '(all)'}, pending ${c.num_pending}, unacknowledged ${c.num_ack_pending}, redelivered ${c.num_redelivered}`;
  if (bad.length > 0) {
    add(
      check,
      'problem',
      `${bad.join('; ')} (${summary})`,
      `delete the consumer and let the inbox create it (manageConsumer: true): ferry streams rm ${stream} --consumer ${name}`,
    );
    return;
  }
  add(check, 'ok', summary);
  if (cfg.max_deliver !== undefined && cfg.max_deliver !== -1) {
    add(
      check,
      'warning',
      `max_deliver ${cfg.max_deliver}: a message whose parking failed (database down) is dropped after that many deliveries`,
      'set max_deliver to -1 and let the inbox park',
    );
  }
  if (ackWaitMs < 5000) {
    add(
      check,
      'warning',
      `ack_wait ${fmtMs(ackWaitMs)} is short: a slow handler's message is redelivered while it still runs`,
      'raise the inbox ackWaitMs above your slowest handler',
    );
  }
}

async function checkPayload(nc: NatsConnection, pool: pg.Pool, outboxReadable: boolean, flags: DoctorFlags, add: Add): Promise<void> {
  const max = nc.info?.max_payload;
  if (max === undefined) {
    add('max_payload', 'skipped', 'the server did not report max_payload');
    return;
  }
  if (flags.maxPayloadBytes > max) {
    add(
      'max_payload',
      'problem',
      `the publisher's maxPayloadBytes ${flags.maxPayloadBytes} is above the server's max_payload ${max}: an event can commit and then never be publishable`,
      `createPublisher({ maxPayloadBytes: ${max} }) or raise max_payload in the nats-server config`,
    );
  } else add('max_payload', 'ok', `maxPayloadBytes ${flags.maxPayloadBytes} <= the server's max_payload ${max}`);
  if (!outboxReadable) return;
  // The data is loaded only up to max_payload: a stored row far larger would end this process too.
  const { rows } = await pool.query<BoundedOutboxEventRow>(largestEventSql(quoteIdentifier(flags.schema)), [max]);
  const row = rows[0];
  if (!row) return;
  const size = row.data === null ? row.data_bytes : encodedSize(encodeEvent(eventFromOutboxRow({ ...row, data: row.data })));
  if (row.data === null) {
    add(
      'max_payload',
      'problem',
      `event ${row.id} has ${row.data_bytes} bytes of data, over the server's max_payload ${max}: it dies in the relay`,
      'ferry dlq discard it (a payload this size belongs in an object store, with a reference in the event)',
    );
  } else if (size > max) {
    add(
      'max_payload',
      'problem',
      `event ${row.id} encodes to ${size} bytes, over the server's max_payload ${max}: it dies in the relay`,
      'raise max_payload in the nats-server config, then ferry dlq retry it; or ferry dlq discard it',
    );
  } else add('max_payload', 'ok', `the largest retained event encodes to ${size} bytes`);
}
