import { ConfigError, describeValue, namedStatement, type Queryable, sqlState } from '@ferry/core';
import pg from 'pg';

// The gate's hot path in as few round trips as possible: BEGIN travels with the
// gate, as multi-statement simple queries. Simple queries take no parameters, so the values are inlined as SQL
// literals escaped by `literal()`; the schema is the pre-quoted identifier.

/** A string as a SQL literal, escaped by node-postgres's `escapeLiteral` (libpq's PQescapeLiteral rules). */
export function literal(value: string): string {
  if (value.includes('\u0000')) throw new RangeError('a PostgreSQL text value cannot contain a NUL character');
  return pg.escapeLiteral(value);
}

/**
 * The row count of a simple query's last statement, from its command tag
 * (`INSERT 0 1`, `UPDATE 0`). The gate's writes return no rows: a
 * `RETURNING` column cost the client a row description to parse on every
 * message.
 */
function lastRowCount(result: unknown): number {
  const results = Array.isArray(result) ? result : [result];
  const count = (results.at(-1) as { rowCount?: unknown } | undefined)?.rowCount;
  if (typeof count !== 'number') {
    // A pool wrapper that drops rowCount would otherwise make every gate look lost: retried, then parked.
    throw new ConfigError(
      'pool',
      `the pool's query results carry no rowCount (got ${describeValue(count)}); the inbox needs node-postgres results: pass a pg.Pool, or a wrapper that keeps rowCount`,
    );
  }
  return count;
}

/**
 * `sequential`: record `v`, then move over versions an operator discarded
 * while an earlier one was missing (inbox migration 000003); the array is
 * empty for nearly every key, and then this costs one comparison.
 */
function advance(schema: string, v: string): string {
  const t = `${schema}.inbox_versions`;
  const next = `${schema}.inbox_next_version(${v}, ${t}.skipped)`;
  return (
    `version = CASE WHEN ${t}.skipped = '{}' THEN ${v} ELSE ${next} END, ` +
    `skipped = CASE WHEN ${t}.skipped = '{}' THEN ${t}.skipped ELSE ARRAY(SELECT x FROM unnest(${t}.skipped) AS x WHERE x > ${next}) END`
  );
}

type GateRule = { sequential: boolean; ignoreParked: boolean };

/**
 * The gate statement for a rule, over SQL expressions for the consumer, key
 * and version: literals for a simple query, or `$1`-`$3` for its prepared form.
 */
function gateSql(schema: string, rule: GateRule, first: boolean, c: string, k: string, v: string): string {
  const t = `${schema}.inbox_versions`;
  const row = `consumer = ${c} AND key = ${k}`;
  const parkedOk = rule.ignoreParked ? '' : ` AND ${t}.parked = 0`;
  if (!rule.sequential) {
    return (
      `INSERT INTO ${t} (consumer, key, version) SELECT ${c}, ${k}, ${v} ` +
      `WHERE NOT EXISTS (SELECT 1 FROM ${t} WHERE ${row} AND version >= ${v}) ` +
      `ON CONFLICT (consumer, key) DO UPDATE SET version = excluded.version, applied_at = now() WHERE ${t}.version < excluded.version`
    );
  }
  if (first) {
    return (
      `INSERT INTO ${t} (consumer, key, version) VALUES (${c}, ${k}, 1) ` +
      `ON CONFLICT (consumer, key) DO UPDATE SET ${advance(schema, '1')}, applied_at = now() WHERE ${t}.version = 0${parkedOk}`
    );
  }
  // `v - 1`, never `version + 1`: v is at least 2 here (a wire version, 1..2^63-1), so it cannot
  // overflow, where the recorded version plus one does at 2^63-1 (issue 43).
  return `UPDATE ${t} SET ${advance(schema, v)}, applied_at = now() WHERE ${row} AND version = ${v} - 1${parkedOk}`;
}

function keyRowSql(schema: string, c: string, k: string): string {
  return `SELECT version::text AS version, parked FROM ${schema}.inbox_versions WHERE consumer = ${c} AND key = ${k}`;
}

function recordMessageSql(schema: string, c: string, id: string): string {
  return `INSERT INTO ${schema}.inbox_messages (consumer, id) VALUES (${c}, ${id}) ON CONFLICT DO NOTHING`;
}

/**
 * The gate's statements as server-side prepared statements, one PREPARE per
 * connection and statement, then `EXECUTE name(literals)` in the same simple
 * query as BEGIN (or ROLLBACK): the plan is made once per connection instead
 * of once per message. Backend CPU per applied message (gate + a one-row
 * handler + COMMIT) went from about 310 µs to 250 µs; a plain transaction
 * with the same handler took 200 µs.
 *
 * A connection on which a statement cannot be prepared, or loses one (a
 * pooler in transaction mode hands each transaction another server
 * connection: EXECUTE then fails with 26000), uses the simple-query text
 * from then on; that message's attempt fails once and is retried.
 */
const PREPARED = new WeakMap<object, Set<string>>();
const UNPREPARABLE = new WeakSet<object>();
const STATEMENTS = new Map<string, { name: string; prepare: string }>();
const DUPLICATE_PREPARED_STATEMENT = '42P05';
const INVALID_SQL_STATEMENT_NAME = '26000';

function statement(types: string, body: string): { name: string; prepare: string } {
  let st = STATEMENTS.get(body);
  if (!st) {
    const { name } = namedStatement('inbox', body);
    st = { name, prepare: `PREPARE ${name}(${types}) AS ${body}` };
    STATEMENTS.set(body, st);
  }
  return st;
}

/** `EXECUTE name(args)` once the statement is prepared on this connection; `undefined` to send the text instead. */
async function executeSql(tx: Queryable, types: string, body: string, args: string[]): Promise<string | undefined> {
  if (typeof tx !== 'object' || tx === null || UNPREPARABLE.has(tx)) return undefined;
  const st = statement(types, body);
  let names = PREPARED.get(tx);
  if (!names?.has(st.name)) {
    try {
      await tx.query(st.prepare);
    } catch (err) {
      if (sqlState(err) !== DUPLICATE_PREPARED_STATEMENT) {
        UNPREPARABLE.add(tx);
        return undefined;
      }
    }
    if (!names) {
      names = new Set();
      PREPARED.set(tx, names);
    }
    names.add(st.name);
  }
  return `EXECUTE ${st.name}(${args.join(', ')})`;
}

/** Sends `sql`; a prepared statement the connection lost makes it use text from now on. */
async function send(tx: Queryable, sql: string): Promise<unknown> {
  try {
    return await tx.query(sql);
  } catch (err) {
    if (sqlState(err) === INVALID_SQL_STATEMENT_NAME && typeof tx === 'object' && tx !== null) {
      PREPARED.delete(tx);
      UNPREPARABLE.add(tx);
    }
    throw err;
  }
}

/**
 * The `SET LOCAL` statements that bound a message's transaction on the server, sent in the same
 * round trip as BEGIN: an instance frozen or cut off inside it loses its session (and the key's row
 * lock) after `idleMs`, and a wait for a key's row lock ends after `lockMs`. Integers only.
 */
export function transactionBoundsSql(idleMs: number, lockMs: number): string {
  return `SET LOCAL idle_in_transaction_session_timeout = ${Math.trunc(idleMs)}; SET LOCAL lock_timeout = ${Math.trunc(lockMs)}; `;
}

/** The gate's parameterised text per schema and rule, built once rather than on every message. */
const PREPARED_GATES = new Map<string, { types: string; body: string }>();

function preparedGate(schema: string, rule: GateRule, first: boolean): { types: string; body: string } {
  const id = `${rule.sequential ? 's' : 'l'}${rule.ignoreParked ? 'i' : 'p'}${first ? '1' : 'n'}${schema}`;
  let gate = PREPARED_GATES.get(id);
  if (!gate) {
    gate = { types: first ? 'text, text' : 'text, text, bigint', body: gateSql(schema, rule, first, '$1', '$2', '$3::bigint') };
    PREPARED_GATES.set(id, gate);
  }
  return gate;
}

/**
 * BEGIN and the version gate as one conditional write, in one round trip: the
 * statement that decides whether the event is new also records its version
 * and takes the row lock, so an applied event writes its version row once and
 * a stale or duplicate one writes nothing (and its transaction ends without a
 * WAL flush).
 *
 * - `latest`: upsert the version where the recorded one is older. A key's
 *   first version is an insert: a second process inserting the same key waits
 *   on the primary key until the first commits, then re-checks, so even
 *   version 1 is serialised across processes. The `NOT EXISTS` pre-check
 *   keeps an already-stale event from locking the row.
 * - `sequential`: only recorded + 1, and (from the stream) only while the key
 *   has no parked events.
 * - A row held by another transaction makes the statement wait; PostgreSQL
 *   then re-checks the condition on the committed row (READ COMMITTED).
 *
 * Resolves `true` when this transaction recorded the event's version and holds
 * the row lock (run the handler, then COMMIT); otherwise read the row with
 * `readKeyRow`.
 */
export async function beginGate(
  tx: Queryable,
  schema: string,
  consumer: string,
  key: string,
  version: bigint,
  rule: GateRule,
  bounds = '',
): Promise<boolean> {
  const first = rule.sequential && version === 1n;
  const c = literal(consumer);
  const k = literal(key);
  const v = version.toString();
  const prepared = preparedGate(schema, rule, first);
  const gate = (await executeSql(tx, prepared.types, prepared.body, first ? [c, k] : [c, k, v])) ?? gateSql(schema, rule, first, c, k, v);
  const result = await send(tx, `BEGIN; ${bounds}${gate}`);
  return lastRowCount(result) > 0;
}

/**
 * After a gate that did not pass: the key's recorded version and parked count
 * as now committed (0 and 0 when the key has no row), with ROLLBACK in the
 * same round trip when `thenRollback`.
 */
export async function readKeyRow(
  tx: Queryable,
  schema: string,
  consumer: string,
  key: string,
  thenRollback: boolean,
): Promise<{ version: bigint; parked: number }> {
  const c = literal(consumer);
  const k = literal(key);
  const select = (await executeSql(tx, 'text, text', keyRowSql(schema, '$1', '$2'), [c, k])) ?? keyRowSql(schema, c, k);
  const result = await send(tx, thenRollback ? `${select}; ROLLBACK` : select);
  const results = Array.isArray(result) ? result : [result];
  const row = (results[0] as { rows?: Array<{ version: string; parked: number }> } | undefined)?.rows?.[0];
  return { version: row ? BigInt(row.version) : 0n, parked: row?.parked ?? 0 };
}

/** `dedupe`: BEGIN and record the message id; `false` when it was already there. One round trip. */
export async function beginAndRecordMessage(tx: Queryable, schema: string, consumer: string, id: string, bounds = ''): Promise<boolean> {
  const c = literal(consumer);
  const i = literal(id);
  const record = (await executeSql(tx, 'text, text', recordMessageSql(schema, '$1', '$2'), [c, i])) ?? recordMessageSql(schema, c, i);
  const result = await send(tx, `BEGIN; ${bounds}${record}`);
  return lastRowCount(result) === 1;
}
