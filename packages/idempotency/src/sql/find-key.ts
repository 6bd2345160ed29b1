/** The live (unexpired) record of one caller's key, committed by an earlier request. $1 scope, $2 principal, $3 key. */
export const findKeySql = (schemaSql: string) =>
  `SELECT fingerprint, status, headers, body, body_kind FROM ${schemaSql}.idempotency_keys
    WHERE scope = $1 AND principal = $2 AND key = $3 AND expires_at > now()`;

export interface KeyRow {
  fingerprint: Buffer;
  status: number | null;
  headers: Record<string, string>;
  body: Buffer | null;
  body_kind: 'none' | 'json' | 'text' | 'bytes';
}
