// Test-only entry (`@ferry/relay/testing`): fault injection that the production path never sets.
// Not part of the documented API; it may change without notice.

export { createRelayWithHooks } from './daemon/relay.js';
export type { RelayTestHooks } from './daemon/relay-emitter.js';
