import { quoteIdentifier } from '@ferry/core';
import { type KeyGap, readKeyGaps, type SkippedVersions, skipMissingVersions } from '@ferry/inbox';
import type pg from 'pg';
import { shellQuote } from '../shell-quote.js';
import { outboxWithState } from '../sql/outbox-state.js';
import { auditMissingReason, isAuditMissing, type Operator, recordAction } from './audit.js';
import { STATE_SQL } from './event-filter.js';
import { type ExpectedSelection, type Selection, SelectionChangedError, sameSelection, selectionOf } from './selection.js';

// One implementation of "accept a sequential key's missing versions as lost" (issue 43, item 1), for
// `ferry inbox skip` and `ferry console` alike: a preview that says what the key waits for, what
// holds its later versions, and whether the outbox still has the missing ones (then a replay comes
// first, with its exact command); then the skip, recorded in operator_actions in its transaction.

/** An outbox row of a missing version (same database, the outbox schema given). */
export interface OutboxVersion {
  seq: string;
  id: string;
  version: string;
  /** `published` (a replay sends it again), `pending`, `backing-off`, `dead` or `discarded`. */
  state: string;
}

export interface SkipTarget {
  /** The inbox tables' schema (and the audit trail's). */
  schema: string;
  /** The inbox's pg-boss schema. */
  bossSchema: string;
  /** Where the producer's outbox is, when in this database (default `schema`). */
  outboxSchema?: string;
  consumer: string;
  key: string;
}

export interface SkipPreview {
  gap: KeyGap;
  /** The versions the skip accepts as lost; undefined when there is nothing to skip (`refusal` says why). */
  range?: { from: bigint; through: bigint };
  refusal?: string;
  /** The outbox's rows of the missing versions (at most OUTBOX_SHOWN). */
  outbox: OutboxVersion[];
  /** The exact `ferry replay` that re-sends the published ones, when there are. */
  replay?: string;
  /** What a confirmation carries: the key, its recorded version and the range. */
  selection: Selection;
}

const OUTBOX_SHOWN = 1000;

/** The selection a skip confirmation holds the change to: the key (as hex: ids are lowercased), its recorded version and the range. */
export function skipSelection(consumer: string, key: string, recorded: bigint, through: bigint): Selection {
  return selectionOf([consumer, Buffer.from(key, 'utf8').toString('hex'), recorded.toString(), through.toString()]);
}

/** `ferry inbox skip` for this key and range, with the flags that differ from the defaults. */
export function skipCommand(t: SkipTarget & { through: bigint; defaults?: { schema: string; bossSchema: string } }, tail = ''): string {
  const extra = [
    ...(t.defaults && t.schema !== t.defaults.schema ? ['--schema', t.schema] : []),
    ...(t.defaults && t.bossSchema !== t.defaults.bossSchema ? ['--boss-schema', t.bossSchema] : []),
  ];
  return `ferry inbox skip --consumer ${t.consumer} --key ${shellQuote(t.key)} --through ${t.through}${extra.length ? ` ${extra.join(' ')}` : ''}${tail}`;
}

/** The outbox rows of key's versions from..through, when the outbox is in this database. */
async function outboxVersions(pool: pg.Pool, outboxSchema: string, key: string, from: bigint, through: bigint): Promise<OutboxVersion[]> {
  const s = quoteIdentifier(outboxSchema);
  const { rows: exists } = await pool.query<{ t: string | null }>('SELECT to_regclass($1)::text AS t', [`${s}.outbox_published`]);
  if (!exists[0]?.t) return [];
  const { rows } = await pool.query<OutboxVersion>(
    `SELECT o.seq::text AS seq, o.id::text AS id, o.version::text AS version, ${STATE_SQL} AS state
       FROM ${outboxWithState(s)} WHERE o.key = $1 AND o.version BETWEEN $2::bigint AND $3::bigint ORDER BY o.version LIMIT ${OUTBOX_SHOWN}`,
    [key, from.toString(), through.toString()],
  );
  return rows;
}

/**
 * What a skip of `key`'s missing versions would do: through `through`, or by default through the
 * version below the lowest one held or discarded. Changes nothing.
 */
export async function previewSkip(pool: pg.Pool, t: SkipTarget, through?: bigint): Promise<SkipPreview> {
  const [gap] = await readKeyGaps(pool, { schema: t.schema, bossSchema: t.bossSchema, consumer: t.consumer, keys: [t.key] });
  const g: KeyGap = gap ?? {
    consumer: t.consumer,
    key: t.key,
    recorded: 0n,
    waitsFor: 1n,
    nextHeld: false,
    parked: 0,
    early: 0,
    discarded: [],
    held: [],
    stuck: false,
  };
  const lowestHeld = g.held[0]?.version;
  const last = through ?? g.missing?.through;
  let refusal: string | undefined;
  if (last === undefined) {
    refusal = g.nextHeld
      ? `key ${JSON.stringify(t.key)} does not wait for a missing version: its next version, ${g.waitsFor}, is ${g.held[0]?.place === 'early' ? 'stored early and applies shortly' : 'parked (retry or discard it: ferry inbox parked list)'}`
      : `key ${JSON.stringify(t.key)} of consumer ${t.consumer} is at version ${g.recorded} and nothing of it waits: name the last version to skip with --through N`;
  } else if (last < g.waitsFor) {
    refusal = `nothing to skip: key ${JSON.stringify(t.key)} of consumer ${t.consumer} is at version ${g.recorded} already`;
  } else if (lowestHeld !== undefined && lowestHeld <= last) {
    refusal =
      lowestHeld === g.waitsFor
        ? `version ${lowestHeld} of key ${JSON.stringify(t.key)} is ${g.held[0]?.place === 'early' ? 'stored early' : 'parked'}: the key does not wait for a missing version`
        : `version ${lowestHeld} of key ${JSON.stringify(t.key)} is ${g.held[0]?.place === 'early' ? 'stored early' : 'parked'}, so it is not missing: skip through ${lowestHeld - 1n} at most`;
  }
  const range = refusal === undefined && last !== undefined ? { from: g.waitsFor, through: last } : undefined;
  const outbox = range ? await outboxVersions(pool, t.outboxSchema ?? t.schema, t.key, range.from, range.through) : [];
  const published = outbox.filter((r) => r.state === 'published');
  const first = published[0];
  const lastPublished = published.at(-1);
  const replay =
    first && lastPublished
      ? `ferry replay --schema ${t.outboxSchema ?? t.schema} --key ${shellQuote(t.key)} --from-seq ${first.seq} --to-seq ${lastPublished.seq}`
      : undefined;
  return {
    gap: g,
    ...(range ? { range } : {}),
    ...(refusal ? { refusal } : {}),
    outbox,
    ...(replay ? { replay } : {}),
    selection: skipSelection(t.consumer, t.key, g.recorded, last ?? 0n),
  };
}

/** What the outbox says of the missing versions, in one line each (empty when it has none of them). */
export function describeOutbox(p: SkipPreview, outboxSchema: string): string[] {
  const lines: string[] = [];
  const published = p.outbox.filter((r) => r.state === 'published');
  if (published.length > 0 && p.replay)
    lines.push(
      `the outbox (schema ${outboxSchema}) still holds ${published.length} of these version(s) (${published.map((r) => r.version).join(', ')}): replay first, then nothing is lost: ${p.replay} --dry-run`,
    );
  const waiting = p.outbox.filter((r) => r.state === 'pending' || r.state === 'backing-off' || r.state === 'dead');
  if (waiting.length > 0)
    lines.push(
      `the outbox (schema ${outboxSchema}) has not published version(s) ${waiting.map((r) => `${r.version} (${r.state})`).join(', ')} yet: ${
        waiting.some((r) => r.state !== 'pending')
          ? `ferry dlq retry --schema ${outboxSchema} --key ${shellQuote(p.gap.key)} sends them`
          : 'the relay sends them'
      }, and the key moves on when they arrive`,
    );
  return lines;
}

export interface SettleSkipOptions extends SkipTarget, Operator {
  pool: pg.Pool;
  through: bigint;
  /** The selection a preview showed (`skipSelection`): anything else changes nothing. */
  expect?: ExpectedSelection;
}

export interface SettledSkip {
  done: SkippedVersions;
  /** Why the skip is not in the audit trail (no trail in the schema, or the role may not write it); the skip is made all the same. */
  notRecorded?: string;
}

/**
 * The skip, and its record in operator_actions in the same transaction (under a savepoint: an inbox
 * schema without the audit trail, or a role that may not write it, still gets its skip, reported as
 * not recorded). A key that moved
 * since the preview changes nothing (SelectionChangedError); the refusal is recorded too.
 */
export async function settleSkip(o: SettleSkipOptions): Promise<SettledSkip> {
  const s = quoteIdentifier(o.schema);
  let notRecorded: string | undefined;
  const entry = (outcome: string, rows: number, extra: Record<string, unknown> = {}) => ({
    actor: o.actor,
    via: o.via,
    action: 'inbox.skip' as const,
    filter: {
      consumer: o.consumer,
      key: o.key,
      through: o.through.toString(),
      ...(o.expect ? { previewDigest: o.expect.digest } : {}),
      ...extra,
    },
    rows,
    outcome,
  });
  try {
    const done = await skipMissingVersions({
      pool: o.pool,
      schema: o.schema,
      bossSchema: o.bossSchema,
      consumer: o.consumer,
      key: o.key,
      through: o.through,
      check: ({ recorded, through }) => {
        if (o.expect && !sameSelection(o.expect, skipSelection(o.consumer, o.key, recorded, through))) {
          const changed = new SelectionChangedError(undefined, 1);
          changed.message = `nothing done: key ${JSON.stringify(o.key)} of consumer ${o.consumer} is at version ${recorded} now, or the range is not the one previewed: preview again`;
          throw changed;
        }
      },
      beforeCommit: async (tx, d) => {
        await tx.query('SAVEPOINT ferry_audit');
        try {
          await recordAction(
            tx,
            s,
            entry('ok', Number(d.through - d.from + 1n > 2_147_483_647n ? 2_147_483_647n : d.through - d.from + 1n), {
              from: d.from.toString(),
              recordedBefore: d.recordedBefore.toString(),
              recorded: d.recorded.toString(),
            }),
          );
          await tx.query('RELEASE SAVEPOINT ferry_audit');
        } catch (err) {
          // As for parked actions: a schema without the trail, or a role that may not write it (an
          // inbox role holds no EXECUTE on record_operator_action), still gets its skip, reported.
          await tx.query('ROLLBACK TO SAVEPOINT ferry_audit');
          notRecorded = isAuditMissing(err) ? auditMissingReason(o.schema) : (err as Error).message;
        }
      },
    });
    return { done, ...(notRecorded ? { notRecorded } : {}) };
  } catch (err) {
    if (err instanceof SelectionChangedError) await recordAction(o.pool, s, entry(err.message, 0)).catch(() => {});
    throw err;
  }
}
