export {
  ConflictError,
  type ConnectionPool,
  isConflictError,
  isValidationError,
  type PooledConnection,
  ValidationError,
} from '@ferry/core';
export {
  type BindingOptions,
  type ExpressBindingOptions,
  type ExpressLikeRequest,
  expressIdempotency,
  type FastifyLikeReply,
  type FastifyLikeRequest,
  fastifyIdempotency,
  type NodeHttpBindingOptions,
  nodeHttpIdempotency,
  writeReply,
} from './bindings.js';
export {
  IdempotencyConflictError,
  IdempotencyInProgressError,
  IdempotencyKeyError,
  IdempotencyPrincipalError,
  isIdempotencyConflictError,
  isIdempotencyInProgressError,
  isIdempotencyKeyError,
  isIdempotencyPrincipalError,
} from './errors.js';
export { canonicalJson, fingerprintHash } from './fingerprint.js';
export {
  type EdgeOptions,
  type EdgeRequest,
  errorReply,
  HTTP_HEADERS,
  HTTP_STATUS,
  type HttpReply,
  handleIdempotentRequest,
  renderReply,
} from './http.js';
export { createIdempotency, RETRY_LATER_STATUSES } from './idempotency-keys.js';
export { IDENTITY_HEADERS } from './identity-headers.js';
export {
  createIdempotencyJanitor,
  type IdempotencyJanitor,
  type IdempotencyJanitorOptions,
  type JanitorState,
} from './janitor.js';
export { MAX_KEY_LENGTH, parseIdempotencyKeyHeader, validateIdempotencyKey } from './key.js';
export { compileIdempotencyOptions, DEFAULT_RETENTION, DEFAULT_WAIT_MS, MIN_RETENTION_MS, parseRetention } from './options.js';
export { MAX_PRINCIPAL_LENGTH } from './principal.js';
export * from './types.js';
