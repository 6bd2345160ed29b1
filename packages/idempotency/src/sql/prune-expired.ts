/**
 * Deletes at most $1 expired rows, oldest first, skipping rows a request is
 * taking over right now. Returns how many it deleted.
 */
export const pruneExpiredSql = (schemaSql: string) =>
  `WITH doomed AS (
     SELECT scope, principal, key FROM ${schemaSql}.idempotency_keys
      WHERE expires_at <= now()
      ORDER BY expires_at
      LIMIT $1
      FOR UPDATE SKIP LOCKED
   )
   DELETE FROM ${schemaSql}.idempotency_keys k USING doomed d
    WHERE k.scope = d.scope AND k.principal = d.principal AND k.key = d.key`;
