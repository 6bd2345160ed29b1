// Test-only entry (`@ferry/relay/testing`): fault injection that the production path never sets.
// Not part of the documented API; it may change without notice.

// The console's queries, for bench/scenarios/console-hot-key.ts to time without HTTP around them.
export { previewFailed } from './actions/failed.js';
export { blockedKeys } from './console/queries.js';
// How the relay takes each lane's next cursor from a claim's rows, for test/relay-order.test.ts.
export { laneCursors } from './daemon/claim-plan.js';
export { createRelayWithHooks } from './daemon/relay.js';
export type { RelayTestHooks } from './daemon/relay-emitter.js';
// The mark as the relay sends it, for bench/scenarios/drain-pg-cost.ts.
export { markPublishedSql } from './sql/mark-published.js';
