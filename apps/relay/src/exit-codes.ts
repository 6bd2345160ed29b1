/** Exit codes of every `ferry` command (documented in docs/operations.md and `ferry --help`). */
export const EXIT = {
  ok: 0,
  /** A runtime failure: a server unreachable, a statement failed. */
  failure: 1,
  /** Bad usage: an unknown or invalid option. Nothing was done. */
  usage: 2,
  /** The database was migrated by a newer Ferry, or a migration failed. */
  migration: 3,
} as const;
