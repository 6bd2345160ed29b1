// @ferry/core's public surface, every name listed (nats.js style): a name not
// here is not exported. The last block is for Ferry's own packages (tracing);
// applications need not use it.
export { backoffDelayMs, equalJitterMs, exponentialCapMs, fullJitterMs } from './backoff.js';
export {
  CONTRACT_HEADERS,
  decodeEvent,
  decodeMessage,
  type EncodedEvent,
  type EncodeOptions,
  encodedSize,
  encodedSizeAtMost,
  encodeEvent,
  formatSequence,
  type HeaderReader,
  headerPairs,
  headerReader,
  natsHeaderReader,
  SEQUENCE_WIDTH,
  type SizedEvent,
  SPEC_VERSION,
  WIRE_HEADERS,
} from './codec.js';
export { type EventMap, eventFromOutboxRow, type FerryEvent, JSON_CONTENT_TYPE, type OutboxEventRow } from './envelope.js';
export {
  ConfigError,
  ConflictError,
  describeValue,
  ERROR_CODES,
  type ErrorCode,
  FerryError,
  InternalError,
  isConfigError,
  isConflictError,
  isFerryError,
  isMigrationError,
  isReservedSubjectError,
  isTransactionTimeoutError,
  isValidationError,
  isVersionOrderError,
  type MessageErrorClass,
  MigrationError,
  messageErrorClass,
  ReservedSubjectError,
  SQLSTATE,
  sqlState,
  TransactionTimeoutError,
  ValidationError,
  VersionOrderError,
} from './errors.js';
export { GRANT_TARGETS, type GrantOptions, type GrantTarget, grantsSql, inboxPolicyName } from './grants.js';
export {
  bossSchemaFor,
  IDENTIFIER_PATTERN,
  idempotencyBossSchemaFor,
  notifyChannel,
  OLD_BOSS_SCHEMA,
  quoteIdentifier,
  relayBossSchemaFor,
  schemaIdentifier,
  validateIdentifier,
} from './identifiers.js';
export { childLogger, type Logger, SILENT_LOGGER } from './logger.js';
export {
  DEFAULT_LANES,
  DEFAULT_SCHEMA,
  foreignTables,
  foreignTablesError,
  laneCountSql,
  listMigrations,
  MAX_LANES,
  MIGRATION_SETS,
  type MigrateOptions,
  type MigrateResult,
  type Migration,
  type MigrationSet,
  migrate,
  migrationSql,
  migrationStatus,
  validateLanes,
} from './migrate.js';
// For Ferry's own packages: the OpenTelemetry plumbing they share (not needed by applications).
export {
  creationParent,
  eventSpanAttributes,
  failSpan,
  MESSAGING_SYSTEM,
  type Otel,
  otel,
  SPAN_ATTRIBUTES,
  spanContextFromHeaders,
  startConsumerSpan,
  traceHeaders,
} from './otel.js';
export { type PgBossDb, pgBossDb, startPgBoss } from './pg-boss.js';
export { deleteInBatches, type PrunerBoss, type PrunerSchedule, startPruner, stopPruner } from './pruner.js';
export { type ConnectionPool, guardConnection, type PooledConnection, protectPool, type Queryable } from './queryable.js';
export { readBounded } from './read-bounded.js';
export { FERRY_RELEASE, RELAY_FLOOR_SETTING, RELAY_PROTOCOL, RELAY_SCHEMA_FLOOR, relayFloorSql } from './release.js';
export { REPLAY_MSG_ID_EXTRA_BYTES, replayMsgIdSuffix } from './replay-msg-id.js';
export { namedStatement } from './statement-name.js';
export { boundedQueries, type TransactionControl, type TransactionOptions, withTransaction } from './transaction.js';
export {
  notInTransactionError,
  requireStillInTransaction,
  requireTransaction,
  type TransactionAware,
  type TransactionState,
  transactionState,
} from './transaction-guard.js';
export {
  CONTROL_CHARACTER,
  isNatsName,
  isReservedHeader,
  isUuid,
  LIMITS,
  RESERVED_SUBJECT_RULE,
  RESERVED_SUBJECT_TOKENS,
  reservedSubjectMessage,
  reservedSubjectToken,
  TRACE_HEADERS,
  validateEventId,
  validateHeaders,
  validateKey,
  validateSource,
  validateSubject,
  validateType,
  validateVersion,
} from './validate.js';
