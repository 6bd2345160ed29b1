import { sqlState } from '@ferry/core';
import type pg from 'pg';

/** `url` with `role` as its user and no password (the test cluster trusts local connections). */
export function roleUrl(url: string, role: string): string {
  const u = new URL(url);
  u.username = role;
  u.password = '';
  return u.toString();
}

/** The SQLSTATE a statement fails with, or `ok (n rows)` when it runs. */
export async function outcome(pool: pg.Pool, sql: string, values: unknown[] = []): Promise<string> {
  try {
    const r = await pool.query(sql, values);
    return `ok (${r.rowCount ?? 0} rows)`;
  } catch (err) {
    return sqlState(err) ?? String(err);
  }
}
