/**
 * Records one operator action (`$1` actor, `$2` via, `$3` action, `$4` filter as JSON, `$5` rows,
 * `$6` outcome) through the SECURITY DEFINER function of outbox migration 000017, the only way a
 * role other than the owner writes the audit trail: the function sets `at` and `db_role` itself,
 * so a caller can neither backdate a row nor name another role.
 */
export function recordOperatorActionSql(schemaSql: string): string {
  return `SELECT ${schemaSql}.record_operator_action($1, $2, $3, $4::jsonb, $5, $6)`;
}
