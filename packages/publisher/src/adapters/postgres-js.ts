import { describeValue, type Queryable, ValidationError } from '@ferry/core';
import { toPostgresText } from './postgres-text.js';
import { withNodePostgresNames } from './server-error.js';

/**
 * PostgreSQL's `unknown` pseudo-type. The server types a parameter declared
 * `unknown` from its context, exactly as one declared 0 (unspecified, what
 * node-postgres sends); but postgres.js replaces a 0 by the type the server
 * describes and then applies its own serializer for that type (`jsonb`:
 * `JSON.stringify` again; `bytea`: hex of the text's UTF-8), while it keeps
 * 705, has no serializer for it, and sends our text as it is.
 */
const UNKNOWN_OID = 705;

/**
 * The part of a postgres.js transaction Ferry uses: the `sql` argument of
 * `sql.begin(async (sql) => …)`, or a reserved connection
 * (`await sql.reserve()`) on which you issued `begin`.
 */
export interface PostgresJsLike {
  // biome-ignore lint/suspicious/noExplicitAny: postgres.js types parameters with its own generics
  unsafe(query: string, parameters?: any[], options?: { prepare?: boolean }): PromiseLike<ArrayLike<any>>;
  typed(value: unknown, oid: number): unknown;
}

/**
 * A postgres.js transaction as a Ferry `Queryable`.
 *
 * Values go out as PostgreSQL input text, typed by the server from the
 * statement, as node-postgres sends them: the outbox row is the same byte for
 * byte whichever driver wrote it. The statement is prepared once per
 * connection unless the `postgres()` instance says `prepare: false` (as it
 * must behind PgBouncer in transaction mode).
 *
 * Refuses the `sql` instance itself: it is a pool, and an event published on
 * it would commit on its own, whatever your transaction does. It cannot tell
 * whether a reserved connection is inside `begin`: that one is yours to open.
 *
 * @example
 * await sql.begin(async (sql) => {
 *   await sql`INSERT INTO orders (id) VALUES (${id})`;
 *   await publisher.publish(fromPostgresJs(sql), { subject: 'orders.placed', key: id, type: 'OrderPlaced', data: { id } });
 * });
 */
export function fromPostgresJs(sql: PostgresJsLike): Queryable {
  if (
    (typeof sql !== 'function' && typeof sql !== 'object') ||
    sql === null ||
    typeof sql.unsafe !== 'function' ||
    typeof sql.typed !== 'function'
  ) {
    throw new ValidationError(
      'tx',
      `fromPostgresJs needs the sql argument of sql.begin(async (sql) => …) or a reserved connection, got ${describeValue(sql)}`,
    );
  }
  // Only the top-level instance has `begin` (a transaction has `savepoint`, a
  // reserved connection `release`).
  if (typeof (sql as { begin?: unknown }).begin === 'function') {
    throw new ValidationError(
      'tx',
      'fromPostgresJs got the postgres.js instance itself, a pool: the event would commit on its own. Publish inside sql.begin(async (tx) => publisher.publish(fromPostgresJs(tx), …))',
    );
  }
  return {
    async query<R>(text: string, values: unknown[] = []) {
      const parameters = values.map((v) => sql.typed(toPostgresText(v), UNKNOWN_OID));
      try {
        // A postgres.js result is the array of rows itself.
        const rows = await sql.unsafe(text, parameters, { prepare: true });
        return { rows: Array.from(rows) as R[] };
      } catch (err) {
        throw withNodePostgresNames(err);
      }
    },
  };
}
