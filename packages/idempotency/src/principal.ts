import { createHash } from 'node:crypto';
import { describeValue, ValidationError } from '@ferry/core';
import { IdempotencyPrincipalError } from './errors.js';
import type { IdempotentRequest } from './types.js';

export const MAX_PRINCIPAL_LENGTH = 1024;

/**
 * The `principal` column of a global key. Not a hex digest and not `''`
 * (rows from before migration 2), so it can never be any caller's key.
 */
export const GLOBAL_PRINCIPAL_COLUMN = '*';

/**
 * The `principal` column for a request: `'*'` for a global key, otherwise the
 * hex sha256 of the principal. A digest rather than the id: user and tenant
 * ids stay out of the table and its backups, and the column has one width
 * whatever a principal looks like. It is not a secret (a known id hashes to a
 * known digest); the table's grants protect it like the answers beside it.
 */
export function principalColumn(request: Pick<IdempotentRequest, 'principal' | 'globalKey'>): string {
  const { principal, globalKey } = request;
  if (globalKey !== undefined && typeof globalKey !== 'boolean') {
    throw new ValidationError('globalKey', `globalKey must be true or false, got ${describeValue(globalKey)}`);
  }
  if (globalKey) {
    if (principal !== undefined) {
      throw new ValidationError(
        'principal',
        "run() got both a principal and globalKey: true; a key is either one caller's or everyone's: pass one of them",
      );
    }
    return GLOBAL_PRINCIPAL_COLUMN;
  }
  if (principal === undefined || principal === null || principal === '') {
    throw new IdempotencyPrincipalError(
      principal,
      'the request has no principal: idempotency keys are scoped per caller, so a key needs the authenticated caller (user or tenant id); authenticate the request first, or declare the keys global (globalKeys: true) if every caller may share them',
    );
  }
  if (typeof principal !== 'string' || principal.length > MAX_PRINCIPAL_LENGTH) {
    throw new IdempotencyPrincipalError(
      principal,
      `the principal must be a string of 1-${MAX_PRINCIPAL_LENGTH} characters (the caller's user or tenant id), got ${describeValue(principal, 40)}`,
    );
  }
  return createHash('sha256').update(`ferry:idempotency:principal\0${principal}`, 'utf8').digest('hex');
}
