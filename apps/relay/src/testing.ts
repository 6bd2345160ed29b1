// Test-only entry (`@ferry/relay/testing`): fault injection that the production path never sets.
// Not part of the documented API; it may change without notice.

export { createRelayWithHooks } from './relay.js';
export type { RelayTestHooks } from './relay-emitter.js';
