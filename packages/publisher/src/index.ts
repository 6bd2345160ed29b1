export {
  ConflictError,
  type ConnectionPool,
  FERRY_RELEASE,
  isConflictError,
  isMigrationError,
  isReservedSubjectError,
  isValidationError,
  isVersionOrderError,
  MigrationError,
  type Queryable,
  ReservedSubjectError,
  ValidationError,
  VersionOrderError,
  withTransaction,
} from '@ferry/core';
export { compilePublisherOptions, createPublisher, MAX_BATCH, refusedByPublishFunction } from './outbox-publisher.js';
export type * from './types.js';
