/** The Ferry release this inbox belongs to (a service may log or expose it beside its own version). */
export { FERRY_RELEASE } from '@ferry/core';
export { consumerConfigDifferences, type InboxConsumerNeeds } from './consumer-config.js';
export { pruneInboxMessages } from './dedupe-prune.js';
export {
  ConfigError,
  ConsumerMismatchError,
  FerryError,
  isConfigError,
  isConsumerMismatchError,
  isMigrationError,
  isValidationError,
  MigrationError,
  PoisonMessageError,
  ValidationError,
} from './errors.js';
export { type ConsumerHealth, type InboxHealth, type InboxInstance, readInboxHealth } from './health.js';
export { createInbox, migrateInbox } from './inbox.js';
export {
  findStuckKeys,
  type KeyGap,
  type KeyGapOptions,
  readKeyGaps,
  type SkipMissingOptions,
  type SkippedVersions,
  skipMissingVersions,
} from './missing-versions.js';
export { type CompiledInboxOptions, compileInboxOptions, INBOX_DEFAULTS, parkQueueName, pruneQueueName, SILENT_LOGGER } from './options.js';
export {
  discardParked,
  listParked,
  type ParkedAdminOptions,
  type ParkedConfirmation,
  type ParkedEvent,
  type ParkedJobFields,
  parkedEventOf,
  retryParked,
} from './parked.js';
export { type FindParkedElsewhereOptions, findParkedElsewhere, moveCommand, type ParkedElsewhere } from './parked-elsewhere.js';
export { type ParkedJobData, type ParkedJobRead, RAW_JSON_MAX, readParkedJob } from './parked-job.js';
export { type MovedParked, type MoveParkedOptions, moveParked } from './parked-move.js';
export {
  type ContractInboxOptions,
  type EventMap,
  type Handler,
  type HandlerContext,
  type Handlers,
  INBOX_MODES,
  type Inbox,
  type InboxCounts,
  type InboxEvent,
  type InboxMode,
  type InboxOptions,
  type InboxReport,
  type InboxReportKind,
  type InboxState,
  type Logger,
  PARK_REASONS,
  type ParkReason,
  type TxBoss,
} from './types.js';
export { createWarnLogger, WARN_LOGGER } from './warn-logger.js';
