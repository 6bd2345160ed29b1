/**
 * A relay that found nothing to send records that it waits for a NOTIFY
 * (outbox migration 000007): while a row of relay_waiting is current, the
 * publish functions send one at commit; otherwise they send none. `$1` is
 * the instance id, `$2` how long the record holds (ms) if it is not renewed:
 * a relay that dies stops being waited for by itself.
 */
export function startWaitingSql(schemaSql: string): string {
  return `INSERT INTO ${schemaSql}.relay_waiting AS w (instance, until) VALUES ($1, now() + $2::int * interval '1 millisecond')
 ON CONFLICT (instance) DO UPDATE SET until = excluded.until`;
}

/** The relay has found work on every poll for a while (a backlog): it polls back to back, so publishers stop notifying it. The row stays (the next wait renews it); `until` is indexed, so this is not a HOT update. */
export function stopWaitingSql(schemaSql: string): string {
  return `UPDATE ${schemaSql}.relay_waiting SET until = '-infinity' WHERE instance = $1 AND until > '-infinity'`;
}

/** The relay stops: its row goes. */
export function forgetWaitingSql(schemaSql: string): string {
  return `DELETE FROM ${schemaSql}.relay_waiting WHERE instance = $1`;
}
