// Issue 42, item 1, as the attacker: a role with exactly the publisher's grants stored events
// with the subjects $JS.API.STREAM.DELETE.<victim>, $JS.API.STREAM.PURGE.<s> and
// $JS.API.CONSUMER.DELETE.<s>.<c>, and an ordinary relay sent them (it publishes with a reply
// subject, so each was a JetStream API request): the stream was deleted, another purged, a
// consumer deleted. Now the publish functions and the JS publisher refuse a subject NATS reserves,
// the relay settles a stored one dead unsent, and the relay runs under a NATS user that may
// publish only to its streams' subjects and the JetStream API calls it makes (docs/security.md).
// Everything NATS here is a private nats-server: a failure on the old code deletes its streams only.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { ERROR_CODES, grantsSql, isReservedSubjectError, quoteIdentifier, SQLSTATE, sqlState, withTransaction } from '@ferry/core';
import { createPublisher, refusedByPublishFunction } from '@ferry/publisher';
import { createTestDatabase, NatsServer, type TestDatabase, uniqueName, waitFor } from '@ferry/testkit';
import { AckPolicy, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import pg from 'pg';
import { markPublished } from './delivery-state.js';
import { ferry } from './ops-helpers.js';
import { type RelayProcess, spawnRelay } from './relay-helpers.js';

/** Subjects NATS reserves: each must be refused at publish and never sent by the relay. */
const RESERVED = [
  '$JS.API.STREAM.DELETE.VICTIM',
  '$JS.API.STREAM.PURGE.VICTIM',
  '$JS.API.CONSUMER.DELETE.VICTIM.billing',
  '$SYS.REQ.SERVER.PING',
  '$KV.b.k',
  '$O.bucket.chunk',
  '$MQTT.sess.x',
  '$js.api.stream.delete.VICTIM',
  '$',
  '_INBOX.x',
  '_INBOX',
  '_R_.abc.def',
  '_GR_.a.b.reply',
];
/** Subjects that only look alike: NATS subjects are case-sensitive, and only the first token counts. */
const ORDINARY = ['perm.$JS.API', '_inbox.x', 'INBOX.x', 'perm._INBOX', 'x$.y'];

/** Rethrows a wait's timeout with the relay's last output, which says why. */
const withOutput = (relay: RelayProcess) => (err: Error) => {
  throw new Error(`${err.message}\nrelay output:\n${relay.output().slice(-3000)}`);
};

const PASSWORDS = { admin: `admin-${randomUUID()}`, relay: `relay-${randomUUID()}` };

/**
 * The relay's NATS user, as docs/security.md gives it: publish to its stream's subjects, the
 * JetStream API calls it makes ($JS.API.INFO always; with --ensure-stream the stream's INFO, CREATE
 * and UPDATE, and STREAM.NAMES), and subscribe to its inbox for the PubAcks.
 */
const RELAY_PERMISSIONS = `{
  publish: { allow: ["perm.>", "$JS.API.INFO", "$JS.API.STREAM.INFO.PERM", "$JS.API.STREAM.CREATE.PERM", "$JS.API.STREAM.UPDATE.PERM", "$JS.API.STREAM.NAMES"] }
  subscribe: { allow: ["_INBOX.>"] }
}`;

describe('reserved subjects never reach NATS, and the relay runs with the permissions docs/security.md gives', () => {
  let db: TestDatabase;
  let s: string;
  let role: string;
  let asPublisher: pg.Pool;
  let nats: NatsServer;
  let admin: NatsConnection;

  const single = (subject: string, key: string, check = false) =>
    asPublisher.query(
      `SELECT * FROM ${s}.publish_event($1, $2, NULL, $3, 'Attack', 'svc', 'application/json', '\\x7b7d', '{}', now(), NULL, $4)`,
      [randomUUID(), key, subject, check],
    );
  const batch = (subjects: string[], key: string) =>
    asPublisher.query(
      `SELECT * FROM ${s}.publish_events($1::uuid[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[],
         $8::bytea[], $9::jsonb[], $10::timestamptz[], NULL, false)`,
      [
        subjects.map(() => randomUUID()),
        subjects.map((_, i) => `${key}-${i}`),
        subjects.map(() => null),
        subjects,
        subjects.map(() => 'Attack'),
        subjects.map(() => 'svc'),
        subjects.map(() => 'application/json'),
        subjects.map(() => Buffer.from('{}')),
        subjects.map(() => '{}'),
        subjects.map(() => new Date().toISOString()),
      ],
    );
  const storedLike = async (prefix: string) =>
    Number(
      (await db.pool.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${s}.outbox WHERE key LIKE $1`, [`${prefix}%`])).rows[0]?.n,
    );

  /** `ferry relay` on this schema and the private server, as the NATS user `user` (its password in the environment). */
  const startRelay = (user: string, password: string, extra: string[]) =>
    spawnRelay(
      [
        '--database-url',
        db.url,
        '--schema',
        db.schema,
        '--nats-url',
        nats.url,
        '--nats-user',
        user,
        '--no-maintenance',
        '--http-port',
        '0',
        ...extra,
      ],
      { FERRY_NATS_PASSWORD: password },
    );

  /** The victim: a stream of five messages with a durable consumer, which the attack deleted or purged. */
  async function victim(): Promise<{ messages: number; consumer: boolean } | undefined> {
    const jsm = await jetstreamManager(admin);
    try {
      const info = await jsm.streams.info('VICTIM');
      const consumer = await jsm.consumers.info('VICTIM', 'billing').then(
        () => true,
        () => false,
      );
      return { messages: info.state.messages, consumer };
    } catch {
      return undefined;
    }
  }

  before(async () => {
    db = await createTestDatabase({ prefix: 'sec_subjects', lanes: 2 });
    s = quoteIdentifier(db.schema);
    role = uniqueName('fsubj');
    await db.pool.query(`CREATE ROLE ${quoteIdentifier(role)} LOGIN`);
    await db.pool.query(grantsSql({ role, for: 'publisher', schema: db.schema }));
    const u = new URL(db.url);
    u.username = role;
    asPublisher = new pg.Pool({ connectionString: u.toString(), max: 2 });
    nats = await NatsServer.start({
      config: `authorization { users = [
        { user: "admin", password: "${PASSWORDS.admin}" }
        { user: "ferry_relay", password: "${PASSWORDS.relay}", permissions: ${RELAY_PERMISSIONS} }
      ] }`,
    });
    admin = await connect({ servers: nats.url, user: 'admin', pass: PASSWORDS.admin });
    const jsm = await jetstreamManager(admin);
    await jsm.streams.add({ name: 'VICTIM', subjects: ['victim.>'] });
    for (let i = 0; i < 5; i++) await jsm.jetstream().publish('victim.orders', JSON.stringify({ i }));
    await jsm.consumers.add('VICTIM', { durable_name: 'billing', ack_policy: AckPolicy.Explicit });
    await jsm.streams.add({ name: 'KV_b', subjects: ['$KV.b.>'] });
  });

  after(async () => {
    await admin?.close();
    await nats?.stop();
    await asPublisher?.end();
    await db.pool.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`);
    await db.pool.query(`DROP ROLE IF EXISTS ${quoteIdentifier(role)}`);
    await db.close();
  });

  test('security - the publisher role cannot store a reserved subject through publish_event or publish_events; nothing is committed', async () => {
    for (const [i, subject] of RESERVED.entries()) {
      for (const check of [false, true]) {
        const err = await single(subject, `att${i}`, check).then(
          () => undefined,
          (e: unknown) => e,
        );
        assert.equal(sqlState(err), SQLSTATE.invalidParameterValue, `${subject}: ${(err as Error | undefined)?.message}`);
        assert.equal((err as { column?: string }).column, 'subject', subject);
        assert.equal((err as { constraint?: string }).constraint, 'reserved_subject', subject);
        assert.ok((err as Error).message.includes(`subject ${JSON.stringify(subject)} is reserved by NATS`), (err as Error).message);
        assert.match((err as Error).message, /publish to a subject of your own, e\.g\. "orders\.placed"/);
        // The publisher's mapping: the same typed error as its own check.
        const mapped = refusedByPublishFunction(err);
        assert.ok(isReservedSubjectError(mapped), subject);
        assert.equal(mapped?.field, 'subject');
      }
      // A batch with one reserved subject among good ones: the whole batch is refused.
      const err = await batch(['perm.ok', subject], `batch${i}`).then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.equal(
        (err as { column?: string } | undefined)?.column,
        'events[1].subject',
        `${subject}: ${(err as Error | undefined)?.message}`,
      );
      assert.equal((err as { constraint?: string }).constraint, 'reserved_subject');
    }
    assert.equal(await storedLike('att'), 0, 'no reserved event stored');
    assert.equal(await storedLike('batch'), 0, 'no event of a refused batch stored');
    for (const [i, subject] of ORDINARY.entries()) await single(subject, `ordinary${i}`);
    assert.equal(await storedLike('ordinary'), ORDINARY.length, 'look-alike subjects are ordinary ones');
    await db.pool.query(`DELETE FROM ${s}.outbox WHERE key LIKE 'ordinary%'`);
  });

  test('security - the JS publisher refuses reserved subjects with a ReservedSubjectError naming the subject, the rule and the fix', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    for (const subject of RESERVED) {
      await assert.rejects(
        withTransaction(db.pool, (tx) => publisher.publish(tx, { subject, key: 'js-att', type: 'Attack', data: {} })),
        (err: unknown) => {
          assert.ok(isReservedSubjectError(err), `${subject}: ${String(err)}`);
          assert.equal(err.code, ERROR_CODES.invalid);
          assert.equal(err.field, 'event.subject');
          assert.equal(err.subject, subject);
          assert.ok(err.message.includes(`event.subject ${JSON.stringify(subject)} is reserved by NATS`), err.message);
          assert.match(err.message, /starts with "\$".*_INBOX, _R_, _GR_.*e\.g\. "orders\.placed"/);
          return true;
        },
      );
      await assert.rejects(
        withTransaction(db.pool, (tx) =>
          publisher.publishMany(tx, [
            { subject: 'perm.ok', key: 'js-batch', type: 'T', data: {} },
            { subject, key: 'js-batch', type: 'T', data: {} },
          ]),
        ),
        (err: unknown) => isReservedSubjectError(err) && err.field === 'events[1].subject',
      );
    }
    assert.equal(await storedLike('js-'), 0, 'nothing committed');
  });

  test('security - a reserved row stored by the owner is settled dead unsent (reserved_subject); the victim stream, its messages and consumer survive; other keys drain', async () => {
    // Written around the functions, as a row from before outbox migration 000016 or the owner's INSERT.
    const insert = (key: string, version: number, subject: string) =>
      db.pool.query(
        `INSERT INTO ${s}.outbox (id, key, version, subject, type, source, content_type, data, headers, occurred_at)
         VALUES ($1, $2, $3, $4, 'Attack', 'svc', 'application/json', '\\x7b7d', '{}', now()) RETURNING id::text`,
        [randomUUID(), key, version, subject],
      );
    const evil = new Map<string, string>();
    for (const [i, subject] of RESERVED.entries()) evil.set((await insert(`evil${i}`, 1, subject)).rows[0]?.id ?? '', subject);
    // A later row of an attacked key: it must wait behind the dead head, in order, and not be sent.
    const behind = (await insert('evil0', 2, 'perm.orders')).rows[0]?.id;
    const jsm = await jetstreamManager(admin);
    await jsm.streams.add({ name: 'PERM', subjects: ['perm.>'] });
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    const good = await withTransaction(db.pool, (tx) =>
      publisher.publishMany(
        tx,
        Array.from({ length: 20 }, (_, i) => ({ subject: 'perm.orders', key: `good${i % 10}`, type: 'OrderPlaced', data: { i } })),
      ),
    );
    // The admin user may publish anywhere: only the relay itself stands between the row and the API.
    const relay = startRelay('admin', PASSWORDS.admin, ['--max-attempts', '2', '--backoff-base-ms', '50', '--backoff-max-ms', '200']);
    try {
      await waitFor(
        async () => {
          const { rows } = await db.pool.query<{ n: string }>(
            `SELECT count(*)::text AS n FROM ${s}.outbox_events WHERE id = ANY ($1::uuid[]) AND (dead_at IS NOT NULL OR published_at IS NOT NULL)`,
            [[...evil.keys()]],
          );
          const published = await db.pool.query<{ n: string }>(
            `SELECT count(*)::text AS n FROM ${s}.outbox_events WHERE id = ANY ($1::uuid[]) AND published_at IS NOT NULL`,
            [good.map((r) => r.id)],
          );
          return Number(rows[0]?.n) === evil.size && Number(published.rows[0]?.n) === good.length;
        },
        { timeoutMs: 30_000, what: 'every reserved row settled (dead, or published as before the fix) and the 20 good events published' },
      ).catch(withOutput(relay));
      // Before the fix: the first attempt deleted VICTIM (the retry then found "stream not found").
      assert.deepEqual(await victim(), { messages: 5, consumer: true }, 'the victim stream keeps its 5 messages and its consumer');
      const { rows } = await db.pool.query<{ id: string; attempts: number; last_error: string | null }>(
        `SELECT id::text, attempts, last_error FROM ${s}.outbox_events WHERE id = ANY ($1::uuid[])`,
        [[...evil.keys()]],
      );
      for (const r of rows) {
        const subject = evil.get(r.id) ?? '';
        assert.equal(r.attempts, 1, `${subject}: dead at its first attempt (permanent), not after retries`);
        assert.ok(
          r.last_error?.startsWith(`reserved_subject: subject ${JSON.stringify(subject)} is reserved by NATS`),
          `${subject}: ${r.last_error}`,
        );
        assert.match(r.last_error ?? '', /the relay did not send it \(ferry dlq discard removes it\)$/);
      }
      const head = await db.pool.query<{ published: boolean; dead: boolean }>(
        `SELECT published_at IS NOT NULL AS published, dead_at IS NOT NULL AS dead FROM ${s}.outbox_events WHERE id = $1`,
        [behind],
      );
      assert.deepEqual(head.rows[0], { published: false, dead: false }, 'the row behind the dead head waits');
      assert.equal((await jsm.streams.info('PERM')).state.messages, 20, 'exactly the 20 good events reached a stream');
      assert.equal((await jsm.streams.info('KV_b')).state.messages, 0, 'nothing reached the $KV stream');
      assert.equal(relay.proc.exitCode, null, `the relay is still running:\n${relay.output().slice(-2000)}`);
    } finally {
      relay.proc.kill('SIGTERM');
      await relay.exited;
    }
    // The operator's view: the reason in ferry dlq list, the subjects in ferry doctor.
    const dlq = await ferry(['dlq', 'list', '--database-url', db.url, '--schema', db.schema, '--json']);
    assert.equal(dlq.code, 0, dlq.err);
    const dead = JSON.stringify(dlq.json());
    for (const subject of RESERVED) assert.ok(dead.includes(JSON.stringify(subject).slice(1, -1)), `dlq list names ${subject}`);
    assert.match(dead, /reserved_subject: /);
    const doctor = await ferry([
      'doctor',
      '--database-url',
      db.url,
      '--schema',
      db.schema,
      '--nats-url',
      nats.url.replace('nats://', `nats://admin:${PASSWORDS.admin}@`),
      '--json',
    ]);
    const finding = doctor
      .json<{ findings: Array<{ check: string; status: string; message: string }> }>()
      .findings.find((f) => f.check === 'reserved subjects');
    assert.equal(finding?.status, 'problem', doctor.out);
    assert.match(finding?.message ?? '', /13 outbox subjects are reserved by NATS/);
    // A reserved row recorded as published (as $KV.b.k was, acked by the KV stream, before the fix):
    // ferry replay fails it and sends nothing, under a user that could.
    const published = (await insert('evilreplay', 1, '$JS.API.STREAM.DELETE.VICTIM')).rows[0]?.id;
    assert.equal(await markPublished(db.pool, db.schema, 'o.id = $1', [published]), 1);
    const replay = await ferry([
      'replay',
      '--database-url',
      db.url,
      '--schema',
      db.schema,
      '--nats-url',
      nats.url.replace('nats://', `nats://admin:${PASSWORDS.admin}@`),
      '--key',
      'evilreplay',
      '--yes',
      '--json',
      '--progress',
      'none',
    ]);
    assert.equal(replay.code, 1, `${replay.out}\n${replay.err}`);
    const report = JSON.parse(replay.out.trim().split('\n').at(-1) ?? '{}') as { replayed?: number; failures?: Array<{ error: string }> };
    assert.equal(report.replayed, 0);
    assert.match(report.failures?.[0]?.error ?? '', /subject "\$JS\.API\.STREAM\.DELETE\.VICTIM" is reserved by NATS.*it was not sent/);
    assert.deepEqual(await victim(), { messages: 5, consumer: true }, 'the victim stream survives the replay too');
    await db.pool.query(`DELETE FROM ${s}.outbox WHERE key LIKE 'evil%' OR key LIKE 'good%'`);
  });

  test('security - under the documented relay permissions the relay drains a backlog (creating its stream), and the user is denied STREAM.DELETE, STREAM.PURGE and CONSUMER.DELETE', async () => {
    const jsm = await jetstreamManager(admin);
    await jsm.streams.delete('PERM').catch(() => false);
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    const ids = await withTransaction(db.pool, (tx) =>
      publisher.publishMany(
        tx,
        Array.from({ length: 200 }, (_, i) => ({
          subject: `perm.orders.${i % 3}`,
          key: `drain${i % 20}`,
          type: 'OrderPlaced',
          data: { i },
        })),
      ),
    );
    const relay = startRelay('ferry_relay', PASSWORDS.relay, ['--ensure-stream', 'PERM=perm.>']);
    try {
      await waitFor(
        async () => {
          const { rows } = await db.pool.query<{ n: string }>(
            `SELECT count(*)::text AS n FROM ${s}.outbox_events WHERE id = ANY ($1::uuid[]) AND published_at IS NOT NULL`,
            [ids.map((r) => r.id)],
          );
          return Number(rows[0]?.n) === ids.length;
        },
        { timeoutMs: 30_000, what: "the backlog drained under the relay's permissions" },
      ).catch(withOutput(relay));
      assert.equal((await jsm.streams.info('PERM')).state.messages, ids.length);
      assert.doesNotMatch(relay.output(), /Permissions Violation/i, 'the relay needed nothing it was not given');
    } finally {
      relay.proc.kill('SIGTERM');
      await relay.exited;
    }

    // The same user, asked by hand for what the attack made the relay ask.
    const nc = await connect({ servers: nats.url, user: 'ferry_relay', pass: PASSWORDS.relay });
    try {
      for (const api of ['$JS.API.STREAM.DELETE.VICTIM', '$JS.API.STREAM.PURGE.VICTIM', '$JS.API.CONSUMER.DELETE.VICTIM.billing']) {
        await assert.rejects(nc.request(api, undefined, { timeout: 2_000 }), /permissions violation/i, api);
      }
      await assert.rejects(nc.request('victim.orders', '{}', { timeout: 2_000 }), /permissions violation/i, 'another stream');
    } finally {
      await nc.close();
    }
    assert.deepEqual(await victim(), { messages: 5, consumer: true }, 'the victim stream is untouched');
  });
});
