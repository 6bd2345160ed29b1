/** The outbox's distinct subjects with their row counts, at most 10,000 (`ferry doctor`; scans the outbox). */
export function outboxSubjectsSql(schemaSql: string): string {
  return `SELECT subject, count(*)::text AS n FROM ${schemaSql}.outbox GROUP BY subject ORDER BY subject LIMIT 10000`;
}
