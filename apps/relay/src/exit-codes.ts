import { CommanderError } from 'commander';

/** Exit codes of every `ferry` command (documented in docs/operations.md and `ferry --help`). */
export const EXIT = {
  ok: 0,
  /** A runtime failure: a server unreachable, a statement failed. */
  failure: 1,
  /** Bad usage: an unknown or invalid option. Nothing was done. */
  usage: 2,
  /** The database was migrated by a newer Ferry, a migration failed, or the schema holds tables Ferry did not create. */
  migration: 3,
  /** `ferry relay` forced to stop: a second signal, or draining outlasted --shutdown-timeout-ms. */
  forced: 4,
} as const;

/** Ends the command with this exit code (after its output), e.g. `ferry doctor` with 1 when it found problems. */
export function exitWith(code: number, message = ''): never {
  throw new CommanderError(code, 'ferry.exit', message);
}
