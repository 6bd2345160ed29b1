/**
 * Fills the claimed row with the answer, before the transaction commits.
 * $1 scope, $2 principal, $3 key, $4 status, $5 headers, $6 body, $7 body kind.
 */
export const storeResultSql = (schemaSql: string) =>
  `UPDATE ${schemaSql}.idempotency_keys SET status = $4, headers = $5::jsonb, body = $6, body_kind = $7
    WHERE scope = $1 AND principal = $2 AND key = $3`;
