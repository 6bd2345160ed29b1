export {
  ConflictError,
  type ConnectionPool,
  isConflictError,
  isMigrationError,
  isValidationError,
  MigrationError,
  type Queryable,
  ValidationError,
  withTransaction,
} from '@ferry/core';
export { compilePublisherOptions, createPublisher, MAX_BATCH } from './outbox-publisher.js';
export type { EventMap, Publisher, PublisherOptions, PublishInput, PublishResult } from './types.js';
