import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { quoteIdentifier, withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import { type JetStreamManager, jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { MsgHdrs, NatsConnection } from '@nats-io/transport-node';
import type pg from 'pg';

export const FERRY_BIN = fileURLToPath(new URL('../../apps/relay/bin/ferry.js', import.meta.url));

export interface StreamEvent {
  id: string;
  key: string;
  version: bigint;
  streamSeq: number;
  subject: string;
  /** When the stream stored it (ms since the epoch, the server's clock). */
  storedAt: number;
}

function streamEvent(h: MsgHdrs | undefined, streamSeq: number, subject: string, storedAt: number): StreamEvent {
  return {
    id: h?.get('ce-id') ?? '',
    key: h?.get('ce-partitionkey') ?? '',
    version: BigInt(h?.get('ce-sequence') || '0'),
    streamSeq,
    subject,
    storedAt,
  };
}

/**
 * Every message of a stream, in stream order, read with an ordered consumer;
 * what it did not deliver within `timeoutMs` is read by sequence (a stream
 * message get, no consumer), so a reader that stalls under load cannot look
 * like messages missing from the stream.
 */
/**
 * One stored message, or null for a deleted sequence. A failure (a request timing out on a
 * loaded machine) is retried: read as "deleted", it made a stream look short (a full-suite run counted
 * 10,352 of 15,000 messages and failed relay-scale's exact count).
 */
async function getStoredMessage(jsm: JetStreamManager, stream: string, seq: number) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await jsm.streams.getMessage(stream, { seq });
    } catch (err) {
      if (attempt >= 5) throw err; // getMessage itself answers null for a deleted sequence
      await new Promise((resolve) => setTimeout(resolve, 200 * attempt));
    }
  }
}

export async function readStream(nc: NatsConnection, stream: string, timeoutMs = 20_000): Promise<StreamEvent[]> {
  const jsm = await jetstreamManager(nc);
  const state = (await jsm.streams.info(stream)).state;
  const total = state.messages;
  const out: StreamEvent[] = [];
  if (total === 0) return out;
  const consumer = await jetstream(nc).consumers.get(stream);
  const deadline = Date.now() + timeoutMs;
  while (out.length < total && Date.now() < deadline) {
    const batch = await consumer.fetch({ max_messages: Math.min(1000, total - out.length), expires: 2000 });
    for await (const m of batch) {
      out.push(streamEvent(m.headers, m.seq, m.subject, Math.floor(m.info.timestampNanos / 1e6)));
    }
  }
  if (out.length < total) {
    const seen = new Set(out.map((e) => e.streamSeq));
    for (let seq = state.first_seq; seq <= state.last_seq; seq++) {
      if (seen.has(seq)) continue;
      const m = await getStoredMessage(jsm, stream, seq);
      if (!m) continue;
      out.push(streamEvent(m.header, m.seq, m.subject, m.time.getTime()));
    }
    out.sort((a, b) => a.streamSeq - b.streamSeq);
  }
  return out;
}

/** Commits `count` events over `keys` keys (round robin), `perTx` per transaction; returns their ids in commit order. */
export async function publishEvents(
  pool: pg.Pool,
  schema: string,
  prefix: string,
  count: number,
  { keys = 50, perTx = 100, keyPrefix = 'k', notify = false }: { keys?: number; perTx?: number; keyPrefix?: string; notify?: boolean } = {},
): Promise<string[]> {
  const publisher = createPublisher({ schema, source: 'relay-test', notify });
  const ids: string[] = [];
  for (let start = 0; start < count; start += perTx) {
    const n = Math.min(perTx, count - start);
    const results = await withTransaction(pool, (tx) =>
      publisher.publishMany(
        tx,
        Array.from({ length: n }, (_, i) => ({
          subject: `${prefix}.orders`,
          key: `${keyPrefix}${(start + i) % keys}`,
          type: 'OrderPlaced',
          data: { n: start + i },
        })),
      ),
    );
    for (const r of results) ids.push(r.id);
  }
  return ids;
}

/** Each id exactly once, and for each key versions strictly ascending in stream order. */
export function assertExactlyOnceInKeyOrder(events: StreamEvent[], expectedIds: Iterable<string>): void {
  const seen = new Map<string, number>();
  for (const e of events) seen.set(e.id, (seen.get(e.id) ?? 0) + 1);
  const dupes = [...seen].filter(([, n]) => n > 1);
  assert.equal(
    dupes.length,
    0,
    `duplicates in the stream: ${dupes.slice(0, 5).join(' ')}${dupes.length ? `\n${describeCopies(events, dupes[0]![0])}` : ''}`,
  );
  const expected = new Set(expectedIds);
  const missing = [...expected].filter((id) => !seen.has(id));
  assert.equal(missing.length, 0, `${missing.length} committed events missing from the stream, e.g. ${missing.slice(0, 3).join(' ')}`);
  assert.equal(events.length, expected.size, 'the stream holds exactly the committed events');
  const last = new Map<string, bigint>();
  for (const e of events) {
    const prev = last.get(e.key) ?? 0n;
    assert.ok(e.version > prev, `key ${e.key}: version ${e.version} after ${prev} in the stream`);
    last.set(e.key, e.version);
  }
}

/** Each copy of event `id` in the stream with its key's messages around it: which copy came late, and after what. */
export function describeCopies(events: StreamEvent[], id: string): string {
  const copy = events.find((e) => e.id === id);
  if (!copy) return '';
  const ofKey = events.filter((e) => e.key === copy.key);
  const at = ofKey.findIndex((e) => e.id === id);
  const lines = ofKey
    .slice(Math.max(0, at - 3))
    .filter((e, i, all) => i < 8 || e.id === id || all[i - 1]?.id === id)
    .map((e) => `  seq ${e.streamSeq} stored ${new Date(e.storedAt).toISOString()} version ${e.version}${e.id === id ? ' <-' : ''}`);
  return `key ${copy.key}:\n${lines.join('\n')}`;
}

export async function countPending(pool: pg.Pool, schema: string): Promise<number> {
  const { rows } = await pool.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${quoteIdentifier(schema)}.outbox_pending`);
  return Number(rows[0]?.n ?? 0);
}

export interface RelayProcess {
  proc: ChildProcess;
  output(): string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Starts `ferry relay …` as a child process; stdout and stderr are collected. */
/** `ferry relay` with these flags, in a process of its own (`bin`: the CLI, or a test fixture that wraps it). */
export function spawnRelay(args: string[], env: NodeJS.ProcessEnv = {}, bin = FERRY_BIN): RelayProcess {
  const proc = spawn(process.execPath, [bin, 'relay', ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  proc.stdout?.on('data', (b: Buffer) => {
    out += b.toString();
  });
  proc.stderr?.on('data', (b: Buffer) => {
    out += b.toString();
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    proc.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return { proc, output: () => out, exited };
}

/** Commits about `perSecond` events a second, five per transaction, round robin over 64 keys, until `stop()`; returns the ids. */
export function steadyLoad(pool: pg.Pool, schema: string, prefix: string, perSecond: number): { stop: () => Promise<string[]> } {
  const publisher = createPublisher({ schema, source: 'relay-load' });
  const ids: string[] = [];
  let running = true;
  let n = 0;
  const done = (async () => {
    while (running) {
      const started = performance.now();
      for (let tx = 0; tx < perSecond / 50; tx++) {
        const results = await withTransaction(pool, (c) =>
          publisher.publishMany(
            c,
            Array.from({ length: 5 }, () => ({ subject: `${prefix}.orders`, key: `k${n % 64}`, type: 'OrderPlaced', data: { n: n++ } })),
          ),
        );
        for (const r of results) ids.push(r.id);
      }
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, 100 - (performance.now() - started))));
    }
  })();
  return {
    stop: async () => {
      running = false;
      await done;
      return ids;
    },
  };
}

/** Commit-to-marked waits of the events committed between two instants (ms since the epoch), by the database's clock. */
export async function waitsDuring(
  pool: pg.Pool,
  schema: string,
  from: number,
  to: number,
): Promise<{ n: number; maxMs: number; p99Ms: number }> {
  const { rows } = await pool.query<{ n: string; max_ms: number | null; p99_ms: number | null }>(
    `SELECT count(*)::text AS n, max(extract(epoch FROM published_at - created_at) * 1000)::float8 AS max_ms,
            percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM published_at - created_at) * 1000)::float8 AS p99_ms
       FROM ${quoteIdentifier(schema)}.outbox_events WHERE created_at BETWEEN to_timestamp($1 / 1000.0) AND to_timestamp($2 / 1000.0)`,
    [from, to],
  );
  return { n: Number(rows[0]?.n ?? 0), maxMs: rows[0]?.max_ms ?? Number.POSITIVE_INFINITY, p99Ms: rows[0]?.p99_ms ?? 0 };
}

/**
 * What the woken relay must not do, checked on the stream: every committed event is there, each key's
 * versions never go back, and nothing stored after the wake repeats an event already stored. A repeat
 * stored *before* the wake is the live relay's own re-send of a row the frozen one had sent but not
 * marked (at-least-once: the takeover re-sends from the key's head), stored twice only when the
 * takeover came later than the duplicate window after the first copy: on a loaded machine
 * it can. Such a repeat must still come right after its first copy in its key (no newer version
 * between them). Everything else counts as stale: it could only come from the woken relay.
 */
export function assertNothingStaleAfter(events: StreamEvent[], committed: string[], wokenAt: number): void {
  const seen = new Set(events.map((e) => e.id));
  const missing = committed.filter((id) => !seen.has(id));
  assert.equal(missing.length, 0, `${missing.length} committed events missing from the stream, e.g. ${missing.slice(0, 3).join(' ')}`);
  const stored = new Set<string>();
  const last = new Map<string, { id: string; version: bigint }>();
  let repeats = 0;
  for (const e of events) {
    const prev = last.get(e.key);
    if (stored.has(e.id)) {
      repeats++;
      assert.ok(e.storedAt < wokenAt, `event ${e.id} stored again after the wake:\n${describeCopies(events, e.id)}`);
      assert.equal(prev?.id, e.id, `event ${e.id} stored again after a newer version of its key:\n${describeCopies(events, e.id)}`);
    } else {
      assert.ok(prev === undefined || e.version > prev.version, `key ${e.key}: version ${e.version} after ${prev?.version}`);
    }
    stored.add(e.id);
    last.set(e.key, { id: e.id, version: e.version });
  }
  assert.equal(events.length, committed.length + repeats, 'the stream holds the committed events and the repeats counted');
}

/**
 * Every committed event is in the stream, and the first copies of each key's events come in version
 * order. Copies stored again are counted, not refused: a takeover re-sends from each key's head what the
 * last holder sent but did not mark, and with a 1 s window JetStream stores those (the relay warns);
 * what a stale sender would add is checked by the caller. Returns the ids stored again and when.
 */
export function checkStream(events: StreamEvent[], committed: string[]): Array<{ id: string; storedAt: number }> {
  const seen = new Set(events.map((e) => e.id));
  const missing = committed.filter((id) => !seen.has(id));
  assert.equal(missing.length, 0, `${missing.length} committed events missing from the stream, e.g. ${missing.slice(0, 3).join(' ')}`);
  const stored = new Set<string>();
  const last = new Map<string, bigint>();
  const again: Array<{ id: string; storedAt: number }> = [];
  for (const e of events) {
    if (stored.has(e.id)) {
      again.push({ id: e.id, storedAt: e.storedAt });
      continue;
    }
    const prev = last.get(e.key);
    assert.ok(prev === undefined || e.version > prev, `key ${e.key}: version ${e.version} first stored after ${prev}`);
    stored.add(e.id);
    last.set(e.key, e.version);
  }
  return again;
}

/**
 * What a relay reported as maybe written after its lease ended (its `wire-late` log lines): what no
 * client can fence, a pause between the wire fence's check and the socket write (wire-fence.ts).
 */
export function reportedLate(output: string): { ids: Set<string>; reasons: string[] } {
  const ids = new Set<string>();
  const reasons: string[] = [];
  for (const line of output.split('\n')) {
    if (!line.includes('"wire-late"')) continue;
    const entry = JSON.parse(line) as { event?: string; ids?: string[]; reason?: string };
    if (entry.event !== 'wire-late') continue;
    for (const id of entry.ids ?? []) ids.add(id);
    reasons.push(`${entry.ids?.length ?? 0}: ${entry.reason}`);
  }
  return { ids, reasons };
}
