import type { Relay, RelayOptions } from './types.js';

/** What a command needs from its process: output streams and the environment. Tests pass their own. */
export interface CommandContext {
  out(line: string): void;
  err(line: string): void;
  env: NodeJS.ProcessEnv;
  /** How `ferry relay` creates its relay: `createRelay` unless a test injects faults (`@ferry/relay/testing`). */
  createRelay?: (options: RelayOptions) => Relay;
}
