import {
  ConfigError,
  encodedSize,
  encodeEvent,
  eventFromOutboxRow,
  LIMITS,
  type Queryable,
  quoteIdentifier,
  replayMsgIdSuffix,
  reservedSubjectMessage,
  reservedSubjectToken,
} from '@ferry/core';
import { type NatsConnection, headers as natsHeaders } from '@nats-io/transport-node';
import type pg from 'pg';
import { type ReplayFailure, resumeCommands } from '../commands/replay-resume.js';
import { PubAcks } from '../daemon/pub-acks.js';
import type { BoundedOutboxEventRow } from '../sql/outbox-event-columns.js';
import { countReplaySql, replayPageSql, replaySelectionPageSql } from '../sql/replay-rows.js';
import { auditMissingReason, isAuditMissing, type Operator, recordAction } from './audit.js';
import {
  auditSelection,
  type ExpectedSelection,
  type Selection,
  SelectionChangedError,
  SelectionHasher,
  sameSelection,
} from './selection.js';

// One implementation of `ferry replay`, for the CLI and `ferry console` alike: the selection, its
// preview, and the per-key pipelined publish of the copies, recorded in operator_actions.
// Over 350 lines, kept whole: the selection, the reading a confirmation is checked against, and the
// run that sends exactly that reading are one contract, and a split would put it in three files.

/** Which retained (published, not discarded) rows a replay re-publishes; every field narrows. */
export interface ReplaySelection {
  fromSeq?: bigint;
  toSeq?: bigint;
  /** created_at at or after. */
  since?: Date;
  /** created_at before. */
  until?: Date;
  key?: string;
  /** Subjects starting with this text. */
  subjectPrefix?: string;
  /** This subject exactly (the console's filter; the CLI has --subject-prefix). */
  subject?: string;
  /** This event type (the console's filter). */
  type?: string;
}

/** What a replay would send: the rows selected now, and their seq range (the run's bound). */
export interface ReplayPreview {
  matched: number;
  firstSeq: string | null;
  lastSeq: string | null;
  /** The selected rows' ids up to lastSeq, in seq order, as a digest: what a confirmation carries (`ReplayOptions.expect`). */
  selection?: Selection;
}

/** The outcome of a replay (`ferry replay --json`). */
export interface ReplayReport extends ReplayPreview {
  /** Copies acknowledged by JetStream. */
  replayed: number;
  /** Each copy's `Nats-Msg-Id` is `<event id>` followed by this suffix. */
  msgIdSuffix: string;
  durationMs: number;
  dryRun: boolean;
  /** The first publish that failed (lowest seq); none of its key's later events was sent. */
  failed: ReplayFailure | null;
  /** Every publish that failed, in seq order (one per key at most). */
  failures: ReplayFailure[];
  /** Selected events not sent because of a failure: the failed keys' later events, and all after a stop. */
  skipped: number;
  /** Selected events deleted before they were read (pruned after the retention, or discarded). */
  vanished: number;
  /** Argument lists (add the connection options) that send exactly the events not sent; empty when none (or the selection has a subject or type). */
  resume: string[][];
  /** Why the run is not in the audit trail, when it is not. */
  notRecorded?: string;
}

/** Refuses a selection that is empty, inverted or would select everything by accident. */
export function checkReplaySelection(sel: ReplaySelection): void {
  const { fromSeq, toSeq, since, until, key, subjectPrefix, subject, type } = sel;
  if ([fromSeq, toSeq, since, until, key, subjectPrefix, subject, type].every((v) => v === undefined)) {
    throw new ConfigError('--from-seq', 'give a range: --from-seq/--to-seq, --since/--until, --key or --subject-prefix');
  }
  if (fromSeq !== undefined && toSeq !== undefined && fromSeq > toSeq) {
    throw new ConfigError('--from-seq', `--from-seq ${fromSeq} is after --to-seq ${toSeq}`);
  }
  if (subjectPrefix !== undefined && subjectPrefix.length === 0) {
    throw new ConfigError(
      '--subject-prefix',
      'an empty --subject-prefix selects every subject: give the prefix you mean (e.g. orders.), or --from-seq 1 to replay everything on purpose',
    );
  }
  if (since && until && since >= until) {
    throw new ConfigError('--since', `--since ${since.toISOString()} is not before --until ${until.toISOString()}`);
  }
}

function replayCondition(schemaSql: string, sel: ReplaySelection): { where: string; values: unknown[] } {
  // Published and not discarded (outbox migration 000015: the delivery record beside the row).
  const conditions = [`EXISTS (SELECT 1 FROM ${schemaSql}.outbox_published d WHERE d.seq = o.seq AND d.dead_at IS NULL)`];
  const values: unknown[] = [];
  const add = (sql: string, value: unknown) => {
    values.push(value);
    conditions.push(sql.replace('?', `$${values.length}`));
  };
  if (sel.fromSeq !== undefined) add('seq >= ?::bigint', sel.fromSeq.toString());
  if (sel.toSeq !== undefined) add('seq <= ?::bigint', sel.toSeq.toString());
  if (sel.since) add('created_at >= ?', sel.since);
  if (sel.until) add('created_at < ?', sel.until);
  if (sel.key !== undefined) add('key = ?', sel.key);
  if (sel.subjectPrefix !== undefined) add('starts_with(subject, ?)', sel.subjectPrefix);
  if (sel.subject !== undefined) add('subject = ?', sel.subject);
  if (sel.type !== undefined) add('type = ?', sel.type);
  return { where: conditions.join(' AND '), values };
}

/** The selection as the audit trail records it. */
function describeSelection(sel: ReplaySelection): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(sel)) {
    if (v === undefined) continue;
    out[k] = v instanceof Date ? v.toISOString() : typeof v === 'bigint' ? v.toString() : v;
  }
  return out;
}

/** Counts the rows a replay of `sel` would send now, with their seq range. */
export async function previewReplay(q: Queryable, schema: string, sel: ReplaySelection): Promise<ReplayPreview> {
  checkReplaySelection(sel);
  const { where, values } = replayCondition(quoteIdentifier(schema), sel);
  const { rows } = await q.query<{ n: string; first: string | null; last: string | null }>(
    countReplaySql(quoteIdentifier(schema), where),
    values,
  );
  const lastSeq = rows[0]?.last ?? null;
  const { selection } = await readSelection(q, quoteIdentifier(schema), sel, lastSeq, false);
  return { matched: Number(rows[0]?.n ?? 0), firstSeq: rows[0]?.first ?? null, lastSeq, selection };
}

/** Rows the selection's ids are read in, per statement. */
const SELECTION_PAGE = 10_000;

/**
 * The selection's rows up to `lastSeq`, in seq order: the Selection of their ids, and (`keep`) their
 * seqs and ids. Read in pages by seq, each its own statement: what is hashed is what each page
 * saw, and a confirmation compares it with the preview's, so a difference refuses, never sends.
 */
async function readSelection(
  q: Queryable,
  schemaSql: string,
  sel: ReplaySelection,
  lastSeq: string | null,
  keep: boolean,
): Promise<{ selection: Selection; seqs: string[]; ids: string[] }> {
  const { where, values } = replayCondition(schemaSql, sel);
  const hasher = new SelectionHasher();
  const seqs: string[] = [];
  const ids: string[] = [];
  let cursor = '0';
  while (lastSeq !== null) {
    const { rows } = await q.query<{ seq: string; id: string }>(replaySelectionPageSql(schemaSql, where, values.length, SELECTION_PAGE), [
      ...values,
      cursor,
      lastSeq,
    ]);
    for (const r of rows) {
      hasher.add(r.id);
      if (keep) {
        seqs.push(r.seq);
        ids.push(r.id);
      }
    }
    if (rows.length < SELECTION_PAGE) break;
    cursor = rows.at(-1)?.seq ?? cursor;
  }
  return { selection: hasher.selection(), seqs, ids };
}

export interface ReplayOptions extends Operator {
  /** Published, not yet acknowledged copies at most. */
  maxInFlight: number;
  /** How long to wait for one PubAck. */
  publishTimeoutMs: number;
  /** After a failure, go on with the other keys. */
  keepGoing?: boolean;
  /** Called with the count of acknowledged copies, after each. */
  onAck?: (replayed: number) => void;
  /** The selection the operator confirmed (the preview's): refuse, and send nothing, unless the rows selected now are exactly these. */
  expect?: ExpectedSelection;
}

interface Row extends BoundedOutboxEventRow {
  seq: string;
}

/** Data bytes one page of the selection may load: pages are cut by bytes as well as rows. */
const PAGE_BYTES = 64 * 1024 * 1024;
const PAGE_ROWS = 500;

/**
 * Re-publishes the rows `preview` counted (up to its last seq, so rows
 * published meanwhile do not join), in seq order, each with a new
 * Nats-Msg-Id (`<event id>:replay:<run time>`) so the stream stores it even
 * inside its duplicate window. Keys pipeline; one key's copies go one at a
 * time. A failure stops the run (with `keepGoing`, only its key). The run is
 * recorded in operator_actions twice: before the first copy (`started: …`, so
 * a run that dies midway, its process killed, is on record all the same) and
 * when it ends, with the copies sent and the outcome. A record that cannot be
 * written is reported in `notRecorded` (the copies are sent regardless, as a
 * parked action's are).
 *
 * Before the first copy the selection is read again (its ids up to the last
 * seq, in seq order) and, with `expect`, compared with the confirmed one: any
 * difference sends nothing (SelectionChangedError, recorded). The run then
 * sends only the rows of that reading, so a row published meanwhile inside
 * the seq range never joins; the audit rows name them (`changed`).
 */
export async function replayEvents(
  pool: pg.Pool,
  nc: NatsConnection,
  schema: string,
  sel: ReplaySelection,
  preview: ReplayPreview,
  o: ReplayOptions,
): Promise<ReplayReport> {
  checkReplaySelection(sel);
  const started = Date.now();
  const report: ReplayReport = {
    ...preview,
    replayed: 0,
    msgIdSuffix: replayMsgIdSuffix(new Date(started)),
    durationMs: 0,
    dryRun: false,
    failed: null,
    failures: [],
    skipped: 0,
    vanished: 0,
    resume: [],
  };
  const schemaSql = quoteIdentifier(schema);
  const filter: Record<string, unknown> = {
    ...describeSelection(sel),
    firstSeq: preview.firstSeq,
    lastSeq: preview.lastSeq,
    msgIdSuffix: report.msgIdSuffix,
    ...(o.expect ? { previewed: o.expect.rows ?? null, previewDigest: o.expect.digest } : {}),
  };
  let startRecorded = false;
  const record = async (which: 'start' | 'end', rows: number, outcome: string) => {
    try {
      await recordAction(pool, schemaSql, { actor: o.actor, via: o.via, action: 'replay', filter, rows, outcome });
      if (which === 'start') startRecorded = true;
    } catch (err) {
      const why = isAuditMissing(err) ? auditMissingReason(schema) : (err as Error).message;
      const what = which === 'start' ? 'its start' : startRecorded ? 'its end (its start is on record, with no end)' : 'its end';
      report.notRecorded = report.notRecorded === undefined ? `${what}: ${why}` : `${report.notRecorded}; ${what}: ${why}`;
    }
  };
  const now = await readSelection(pool, schemaSql, sel, preview.lastSeq, true);
  filter.changed = auditSelection(now.ids);
  report.selection = now.selection;
  if (o.expect && !sameSelection(o.expect, now.selection)) {
    const refused = new SelectionChangedError(o.expect.rows, now.selection.rows, 'published event(s)');
    filter.changed = auditSelection([]);
    await record('end', 0, refused.message);
    throw refused;
  }
  // What this run sends: the rows just read (the same as the preview's when it was confirmed).
  report.matched = now.seqs.length;
  report.firstSeq = now.seqs[0] ?? null;
  let error: unknown;
  if (now.seqs.length > 0) {
    await record('start', 0, `started: ${now.seqs.length} copies to send (a run that ends records another row)`);
    try {
      await publishAll(pool, nc, schemaSql, sel, now.seqs, report, o);
    } catch (err) {
      error = err;
    }
  }
  report.durationMs = Date.now() - started;
  const problems = [
    ...(error ? [(error as Error).message ?? String(error)] : []),
    ...(report.failed ? [`${report.failures.length} publish(es) failed, the first: ${report.failed.error}`] : []),
    ...(report.vanished > 0 ? [`${report.vanished} vanished`] : []),
  ];
  await record('end', report.replayed, problems.length ? problems.join('; ') : 'ok');
  if (error !== undefined) throw error;
  return report;
}

async function publishAll(
  pool: pg.Pool,
  nc: NatsConnection,
  schemaSql: string,
  sel: ReplaySelection,
  only: readonly string[],
  report: ReplayReport,
  o: ReplayOptions,
): Promise<void> {
  const selected = replayCondition(schemaSql, sel);
  const acks = new PubAcks(nc, o.publishTimeoutMs);
  const inFlight = new Set<Promise<void>>();
  /** Each key's latest send, settled once its outcome is recorded. */
  const lastOfKey = new Map<string, Promise<void>>();
  const failedKeys = new Set<string>();
  let stop = false;
  let read = 0;
  let lastAttempted = 0n;
  let maxAcked: bigint | null = null;
  const fail = (row: Row, error: string) => {
    report.failures.push({ seq: row.seq, id: row.id, key: row.key, error });
    failedKeys.add(row.key);
    if (!o.keepGoing) stop = true;
  };
  // The run sends the rows read before it (`only`, seq order), a chunk at a time: a row published
  // meanwhile inside the seq range does not join it, and every row read but not found again was
  // deleted during the run (vanished).
  const sendPages = async (): Promise<void> => {
    for (let at = 0; at < only.length && !stop; at += PAGE_ROWS) {
      const chunk = only.slice(at, at + PAGE_ROWS);
      const values = [...selected.values, chunk];
      const where = `${selected.where} AND o.seq = ANY ($${values.length}::bigint[])`;
      const upTo = chunk.at(-1) ?? '0';
      let cursor = (BigInt(chunk[0] ?? '1') - 1n).toString();
      pages: while (!stop) {
        const maxPayload = nc.info?.max_payload ?? LIMITS.maxEventBytes;
        const { rows } = await pool.query<Row>(replayPageSql(schemaSql, where, values.length, PAGE_ROWS), [
          ...values,
          cursor,
          upTo,
          Math.min(maxPayload, LIMITS.maxEventBytes),
          PAGE_BYTES,
        ]);
        for (const row of rows) {
          read++;
          // A key's next row goes out only after its previous one is acknowledged: a failure
          // (refused here, rejected by the server, or timed out) must stop the key's later rows
          // before they are sent, or they reach the stream ahead of it.
          const previous = lastOfKey.get(row.key);
          if (previous) await previous;
          if (stop) break pages;
          if (failedKeys.has(row.key)) continue; // keepGoing: this key stopped at its failure
          while (inFlight.size >= o.maxInFlight) await Promise.race(inFlight);
          if (stop) break pages;
          lastAttempted = BigInt(row.seq);
          // Never sent (it would be a command to the server, e.g. $JS.API.STREAM.DELETE.…), however it was stored.
          if (reservedSubjectToken(row.subject) !== undefined) {
            fail(row, `${reservedSubjectMessage(row.subject)}; it was not sent`);
            continue;
          }
          if (row.data === null) {
            fail(
              row,
              `the event's data is ${row.data_bytes} bytes, over the NATS server's max_payload of ${maxPayload}; it was not loaded`,
            );
            continue;
          }
          const event = eventFromOutboxRow({ ...row, data: row.data });
          const encoded = encodeEvent(event, { msgId: `${row.id}${report.msgIdSuffix}` });
          // Checked here, before sending, on the copy's real wire size (its longer Nats-Msg-Id counted).
          const size = encodedSize(encoded);
          if (size > maxPayload) {
            fail(row, `the copy encodes to ${size} bytes, over the NATS server's max_payload of ${maxPayload}`);
            continue;
          }
          const h = natsHeaders();
          for (const [name, value] of encoded.headers) h.append(name, value);
          // Sent in seq order on one connection, so the copies reach the stream in seq order.
          const p = acks.publish(encoded.subject, encoded.body, h).then(
            () => {
              report.replayed++;
              const seq = BigInt(row.seq);
              if (maxAcked === null || seq > maxAcked) maxAcked = seq;
              o.onAck?.(report.replayed);
            },
            (err: Error) => fail(row, err.message),
          );
          const tracked = p.finally(() => {
            inFlight.delete(tracked);
            if (lastOfKey.get(row.key) === tracked) lastOfKey.delete(row.key);
          });
          inFlight.add(tracked);
          lastOfKey.set(row.key, tracked);
        }
        if (rows.length === 0) break; // a page cut by bytes is short, and not the last one
        cursor = rows.at(-1)?.seq ?? cursor;
      }
    }
    await Promise.all(inFlight);
  };
  try {
    await sendPages();
  } finally {
    acks.close();
  }
  report.failures.sort((a, b) => (BigInt(a.seq) < BigInt(b.seq) ? -1 : 1));
  report.failed = report.failures[0] ?? null;
  if (!stop) report.vanished = Math.max(0, only.length - read);
  report.skipped = Math.max(0, only.length - report.vanished - report.replayed - report.failures.length);
  // The CLI has no --subject or --type: a console selection with them gets no resume commands.
  if (sel.subject !== undefined || sel.type !== undefined) return;
  report.resume = resumeCommands(
    {
      ...(sel.since ? { since: sel.since } : {}),
      ...(sel.until ? { until: sel.until } : {}),
      ...(sel.subjectPrefix !== undefined ? { subjectPrefix: sel.subjectPrefix } : {}),
      ...(sel.key !== undefined ? { key: sel.key } : {}),
      keepGoing: Boolean(o.keepGoing),
      lastSeq: report.lastSeq,
      failures: report.failures,
    },
    lastAttempted,
    maxAcked,
  );
}
