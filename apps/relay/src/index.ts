export { buildProgram, main } from './cli.js';
export type { CommandContext } from './context.js';
export { type Classified, classifyPublishError } from './errors.js';
export { EXIT } from './exit-codes.js';
export { lockNamespace } from './lane-leaser.js';
export { createRelay } from './relay.js';
export { compileRelayOptions, RELAY_DEFAULTS, RELAY_LIMITS, retrySpanMs } from './relay-options.js';
export { type ClaimedRow, claimBatchSql } from './sql/claim-batch.js';
export * from './types.js';
