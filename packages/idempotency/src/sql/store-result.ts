/** Fills the claimed row with the answer, before the transaction commits. $1 scope, $2 key, $3 status, $4 headers, $5 body, $6 body kind. */
export const storeResultSql = (schemaSql: string) =>
  `UPDATE ${schemaSql}.idempotency_keys SET status = $3, headers = $4::jsonb, body = $5, body_kind = $6
    WHERE scope = $1 AND key = $2`;
