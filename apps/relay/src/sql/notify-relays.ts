/** Wakes the relays LISTENing on channel `$1` (payload `$2`): a changed row is due now. */
export const NOTIFY_RELAYS_SQL = 'SELECT pg_notify($1, $2)';
