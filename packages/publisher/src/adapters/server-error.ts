/**
 * The publisher turns a unique violation into a `ConflictError` by reading
 * the SQLSTATE from `code` and the violated constraint from `constraint`:
 * node-postgres's names. postgres.js calls the constraint `constraint_name`.
 * This adds the node-postgres name to the driver's own error object (not a
 * wrapper, so its class, stack and other fields stay what the caller's own
 * error handling expects).
 */
export function withNodePostgresNames(err: unknown): unknown {
  if (typeof err === 'object' && err !== null && 'constraint_name' in err && !('constraint' in err)) {
    Object.defineProperty(err, 'constraint', {
      value: (err as { constraint_name: unknown }).constraint_name,
      configurable: true,
      writable: true,
    });
  }
  return err;
}
