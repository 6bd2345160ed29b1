import type { Queryable } from '@ferry/core';

/**
 * Whether `ferry migrate --inbox` ran on `schema` (given unquoted, as a literal): without this check
 * an unmigrated schema started fine and then failed every message with "relation does not exist",
 * parking all of them (issue 16).
 */
export async function inboxTablesExist(db: Queryable, schema: string): Promise<boolean> {
  const { rows } = await db.query<{ t: string | null }>(`SELECT to_regclass(format('%I.inbox_versions', $1::text))::text AS t`, [schema]);
  return rows[0]?.t != null;
}
