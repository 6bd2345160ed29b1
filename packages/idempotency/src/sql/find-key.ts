/** The live (unexpired) record of a key, committed by an earlier request. */
export const findKeySql = (schemaSql: string) =>
  `SELECT fingerprint, status, headers, body, body_kind FROM ${schemaSql}.idempotency_keys
    WHERE scope = $1 AND key = $2 AND expires_at > now()`;

export interface KeyRow {
  fingerprint: Buffer;
  status: number | null;
  headers: Record<string, string>;
  body: Buffer | null;
  body_kind: 'none' | 'json' | 'text' | 'bytes';
}
