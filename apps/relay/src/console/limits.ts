// The console's fixed bounds, shared by its pages.

/** Rows each list shows at most. */
export const LIST_LIMIT = 200;
/**
 * A shared read is read again after PACE times its own duration at the soonest (`pace` option): each
 * of the three (the overview's status, its per-minute chart, the blocked keys) then takes at most 1/150
 * of a database connection's time, 2 % together, however large the outbox and however many tabs are open.
 */
export const PACE = 150;
/** Failure groups the blocked keys page shows at most. */
export const GROUPS_SHOWN = 20;
/** Events one console replay sends at most (it answers when done); more is `ferry replay`'s job. */
export const REPLAY_MAX = 100_000;
/** Payload bytes read for one event (the rest is counted, not loaded). */
export const PAYLOAD_BYTES = 64 * 1024;
/** The largest form a POST may send. */
export const BODY_LIMIT = 64 * 1024;
/** How long a login lasts. */
export const SESSION_MS = 12 * 3600_000;
