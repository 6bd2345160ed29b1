/**
 * Inserts the key's row in the caller's transaction, or takes over an expired
 * row the janitor has not pruned yet (an expired key counts as new). Returns
 * no row when a live record exists: then the request is a retry (or a misuse).
 * $1 scope, $2 principal (digest, or '*' for global keys), $3 key, $4 fingerprint, $5 retention in ms.
 */
export const claimKeySql = (schemaSql: string) =>
  `INSERT INTO ${schemaSql}.idempotency_keys AS k (scope, principal, key, fingerprint, expires_at)
   VALUES ($1, $2, $3, $4, now() + $5::bigint * interval '1 millisecond')
   ON CONFLICT (scope, principal, key) DO UPDATE
     SET fingerprint = EXCLUDED.fingerprint, status = NULL, headers = '{}'::jsonb, body = NULL, body_kind = 'none',
         created_at = now(), expires_at = EXCLUDED.expires_at
     WHERE k.expires_at <= now()
   RETURNING 1 AS claimed`;
