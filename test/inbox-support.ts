// Shared fixtures of the inbox tests: events published straight to JetStream
// through the core codec (no relay), an effects table, and an inbox factory
// that cleans up after itself.
import { randomUUID } from 'node:crypto';
import { encodeEvent, type FerryEvent, quoteIdentifier } from '@ferry/core';
import { createInbox, type Inbox, type InboxOptions, type InboxReport } from '@ferry/inbox';
import { createTestDatabase, createTestStream, type TestDatabase, type TestStream } from '@ferry/testkit';
import { jetstream } from '@nats-io/jetstream';
import { headers, type NatsConnection } from '@nats-io/transport-node';

export interface EventSpec {
  key: string;
  version: number | bigint;
  type?: string;
  data?: unknown;
  id?: string;
  contentType?: string;
  body?: Uint8Array;
}

export function ferryEvent(prefix: string, spec: EventSpec): FerryEvent {
  const type = spec.type ?? 'Set';
  return {
    id: spec.id ?? randomUUID(),
    key: spec.key,
    version: BigInt(spec.version),
    subject: `${prefix}.${type.toLowerCase()}`,
    type,
    source: 'ferry-test',
    time: new Date(),
    contentType: spec.contentType ?? 'application/json',
    data: spec.body ?? Buffer.from(JSON.stringify(spec.data ?? { key: spec.key, version: Number(spec.version) })),
    headers: {},
  };
}

/**
 * Publishes events in order and awaits every PubAck. `msgIdSuffix` gives each
 * message a distinct `Nats-Msg-Id` (as `ferry replay` does), so JetStream keeps
 * the copy instead of dropping it as a duplicate.
 */
export async function publishEvents(
  nc: NatsConnection,
  events: readonly FerryEvent[],
  options: { msgIdSuffix?: string } = {},
): Promise<void> {
  const js = jetstream(nc);
  const acks: Promise<unknown>[] = [];
  for (const event of events) {
    const encoded = encodeEvent(event, options.msgIdSuffix ? { msgId: `${event.id}/${options.msgIdSuffix}` } : {});
    const h = headers();
    for (const [name, value] of encoded.headers) h.set(name, value);
    acks.push(js.publish(encoded.subject, encoded.body, { headers: h }));
    if (acks.length >= 512) await Promise.all(acks.splice(0));
  }
  await Promise.all(acks);
}

/** Publishes a raw message (poison cases) with the given headers. */
export async function publishRaw(nc: NatsConnection, subject: string, hdrs: Record<string, string>, body: Uint8Array): Promise<void> {
  const h = headers();
  for (const [name, value] of Object.entries(hdrs)) h.set(name, value);
  await jetstream(nc).publish(subject, body, { headers: h });
}

export interface InboxFixture {
  db: TestDatabase;
  stream: TestStream;
  /** Quoted schema. */
  s: string;
  bossSchema: string;
  reports: InboxReport[];
  inboxes: Inbox[];
  /** Creates (not starts) an inbox on this fixture's database and stream. */
  inbox(options: Partial<InboxOptions> & Pick<InboxOptions, 'handlers'>): Inbox;
  /** Rows of the effects table, ordered. */
  effects(): Promise<Array<{ key: string; version: string }>>;
  close(): Promise<void>;
}

/**
 * A migrated inbox schema with `effects(key, version)` (unique, so a double
 * apply fails loudly) and `state(key, version)`, plus a stream of its own.
 */
export async function inboxFixture(options: { max?: number; duplicateWindowMs?: number } = {}): Promise<InboxFixture> {
  const db = await createTestDatabase({ migrate: ['inbox'], max: options.max ?? 6 });
  const stream = await createTestStream({ duplicateWindowMs: options.duplicateWindowMs ?? 120_000 });
  const s = quoteIdentifier(db.schema);
  await db.pool.query(
    `CREATE TABLE ${s}.effects (key text NOT NULL, version bigint NOT NULL, applied_at timestamptz NOT NULL DEFAULT clock_timestamp(), PRIMARY KEY (key, version))`,
  );
  await db.pool.query(`CREATE TABLE ${s}.state (key text PRIMARY KEY, version bigint NOT NULL)`);
  const bossSchema = `${db.schema}_boss`;
  const reports: InboxReport[] = [];
  const inboxes: Inbox[] = [];
  return {
    db,
    stream,
    s,
    bossSchema,
    reports,
    inboxes,
    inbox(opts) {
      const inbox = createInbox({
        pool: db.pool,
        nc: stream.nc,
        stream: stream.name,
        consumer: 'billing',
        schema: db.schema,
        bossSchema,
        backoffMs: [50],
        parkPollIntervalMs: 500,
        // A parked head fails after parkRetryLimit retries, not after the default 15-minute retry span: tests of
        // what an operator does with a failed head need one quickly. inbox-retry-span.test.ts sets its own.
        retrySpanMs: 0,
        // stop() waits for the open pull request to end: a short one keeps the suite quick.
        pullExpiresMs: 2_000,
        onEvent: (r) => reports.push(r),
        ...opts,
      } as InboxOptions);
      inboxes.push(inbox);
      return inbox;
    },
    async effects() {
      const { rows } = await db.pool.query<{ key: string; version: string }>(
        `SELECT e.key, e.version::text AS version FROM ${s}.effects e ORDER BY e.key, e.version`, // the bigint, not its text: 10 after 9
      );
      return rows;
    },
    async close() {
      for (const inbox of inboxes) await inbox.stop().catch(() => {});
      await stream.close();
      await db.pool.query(`DROP SCHEMA IF EXISTS ${quoteIdentifier(bossSchema)} CASCADE`).catch(() => {});
      await db.close();
    },
  };
}

/** The effect every test handler writes: one effects row per applied (key, version), and the latest state. */
export const EFFECT_SQL = (s: string) => ({
  effect: `INSERT INTO ${s}.effects (key, version) VALUES ($1, $2)`,
  state: `INSERT INTO ${s}.state (key, version) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET version = excluded.version`,
});

export function countReports(reports: readonly InboxReport[], kind: InboxReport['kind']): number {
  return reports.filter((r) => r.kind === kind).length;
}
