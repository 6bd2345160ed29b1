// @ferry/relay: the relay as a library (createRelay and its types, documented in docs/relay.md
// "Library API") and the `ferry` CLI (bin/ferry.js runs main). Fault-injection hooks for tests
// live apart, in @ferry/relay/testing.

// The CLI, for embedding it or running it in tests.
export { buildProgram, main } from './cli.js';
// The operator console (`ferry console`), for embedding it or running it in tests.
export { type ConsoleOptions, type ConsoleServer, startConsole } from './console/server.js';
export type { CommandContext } from './context.js';
// Internals the benchmarks and tests measure directly: the claim statement, the lock namespaces, the event columns.
export { lockNamespace } from './daemon/lease-legacy-locks.js';
// The library: a relay instance, its options, defaults and events.
export { createRelay } from './daemon/relay.js';
export {
  type Classified,
  CommandFailedError,
  classifyPublishError,
  NatsConnectError,
  NatsUnavailableError,
  NotConfirmedError,
  NotMigratedError,
  RELAY_ERROR_CODES,
  RelayError,
  type RelayErrorCode,
  StartAbandonedError,
} from './errors.js';
export { EXIT } from './exit-codes.js';
export { compileRelayOptions, RELAY_DEFAULTS, RELAY_LIMITS, type RetrySpanOptions, retrySpanMs } from './relay-options.js';
export { type ClaimedRow, claimBatchSql } from './sql/claim-batch.js';
export { OUTBOX_EVENT_COLUMNS } from './sql/outbox-event-columns.js';
export {
  type CompiledRelayOptions,
  type EnsureStream,
  FAILURE_REASONS,
  type FailureReason,
  type Logger,
  RELAY_STATES,
  type Relay,
  type RelayEvents,
  type RelayOptions,
  type RelayState,
} from './types.js';
