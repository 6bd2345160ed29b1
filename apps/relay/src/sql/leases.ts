import { RELAY_FLOOR_SETTING } from '@ferry/core';

// The lane lease statements (outbox migration 000010): a lease is a row with a term, decided by the
// database's clock alone (now()). Each statement is short and never waits for a lock: a take skips
// rows another take has locked, and renewals and releases touch only the caller's own rows.

const ms = (n: number) => `$${n}::bigint * interval '1 millisecond'`;

/**
 * Whether instance row `i` still has its lease connection open. A crashed
 * instance's connection closes at once, so its lanes need not wait for the
 * term: the fast path that session advisory locks used to give. The term
 * still bounds everything else (a frozen process's connection stays open).
 */
function connected(i: string): string {
  // pg_stat_get_activity(pid) looks up one backend; the pg_stat_activity view scanned them all, once per
  // lease row, and doubled the lease connection's CPU.
  return `EXISTS (SELECT 1 FROM pg_stat_get_activity(${i}.backend_pid) a WHERE a.application_name = ${i}.application_name)`;
}

/**
 * The part of the term after its last renewal that a lease stays untakeable
 * when its owner's connection is gone (or its heartbeat row). The holder
 * stops by its own clock at 0.75 T after the renewal statement *started*
 * (`leaseSafetyMarginMs`), which is before the database's `renewed_at`; the
 * 0.05 T more cover the write path (the wire fence's check and the socket
 * write are one synchronous turn) and the two clocks' rates. A crashed
 * instance's lanes so move 0.47–0.8 T after the crash, not at once: a
 * connection that ended says nothing of a process that may still send
 * (issue 41: B took A's lanes 786 ms after A's lease connection was
 * killed, while A sent for 2.46 s more and stored 3,735 ids twice).
 */
export const LEASE_FENCE_FRACTION = 0.8;

/** The moment by the database's clock after which the holder of lease row `l` no longer sends, whatever happened to it. */
function fencePassed(l: string): string {
  return `${l}.renewed_at + (${l}.expires_at - ${l}.renewed_at) * ${LEASE_FENCE_FRACTION} <= now()`;
}

/** The owner of lease row `l` has no heartbeat row with its lease connection open (crashed, connection killed, benched). */
function ownerGone(schemaSql: string, l: string): string {
  return `NOT EXISTS (SELECT 1 FROM ${schemaSql}.relay_instances i WHERE i.instance = ${l}.owner AND ${connected('i')})`;
}

/**
 * A lease another instance may take: free, its term run out, or its owner
 * gone and its fence passed. Never while the holder may still believe it
 * holds it.
 */
function takeable(schemaSql: string, l: string): string {
  return `(${l}.owner IS NULL OR ${l}.expires_at <= now() OR (${ownerGone(schemaSql, l)} AND ${fencePassed(l)}))`;
}

/** The rule that made lease row `l` takeable, for the takeover log line (the `takeable` order). */
function takeRule(schemaSql: string, l: string): string {
  return `CASE WHEN ${l}.owner IS NULL THEN 'free' WHEN ${l}.expires_at <= now() THEN 'term' WHEN ${ownerGone(schemaSql, l)} THEN 'connection' ELSE 'free' END`;
}

/**
 * The counts every tick needs: live instances other than `$1` (plus this one) and lanes that may be taken.
 * An instance below the schema's relay floor (outbox migration 000013) is not counted: the database
 * refuses it every lease, and counting it would leave its share of the lanes to nobody.
 */
function countsSql(schemaSql: string): string {
  return `(SELECT count(*)::int FROM ${schemaSql}.relay_instances i WHERE i.expires_at > now() AND i.instance <> $1 AND ${connected('i')}
          AND i.protocol >= (SELECT s.value::int FROM ${schemaSql}.settings s WHERE s.name = '${RELAY_FLOOR_SETTING}')) + 1 AS live,
       (SELECT count(*)::int FROM ${schemaSql}.relay_leases f WHERE ${takeable(schemaSql, 'f')}) AS free`;
}

/**
 * The cheap check of every poll: how many instances are live and how many
 * lanes may be taken (`$1` this instance). Read-only.
 */
export function leaseCountsSql(schemaSql: string): string {
  return `SELECT ${countsSql(schemaSql)}`;
}

/**
 * Renews this instance's heartbeat and its leases in one statement, every
 * third of the term: `$1` instance, `$2` application_name, `$3` term in ms,
 * `$4` lanes held, `$5` their epochs, `$6` the release and `$7` the relay
 * protocol this instance reports (the database leases lanes only to an
 * instance whose protocol is at or above the schema's floor). A lane comes back in `lanes` only if
 * this instance still owns it under the same epoch: a lane missing from it
 * was taken by another instance after its term ran out. A lane the
 * database still gives this instance but it no longer holds (its clock
 * dropped it, its lease connection ended) is released in the same
 * statement: it sends nothing of it, so the next poll of any instance may
 * take it, instead of the term, or the fence, passing with no sender. The counts are those
 * of a poll (the heartbeat written here is not visible to them: the instance
 * counts itself).
 */
export function renewLeasesSql(schemaSql: string): string {
  return `WITH beat AS (
  INSERT INTO ${schemaSql}.relay_instances AS i (instance, application_name, backend_pid, client_addr, seen_at, expires_at, release, protocol)
  VALUES ($1, $2, pg_backend_pid(), inet_client_addr()::text, now(), now() + ${ms(3)}, $6, $7)
  ON CONFLICT (instance) DO UPDATE
    SET application_name = excluded.application_name, backend_pid = excluded.backend_pid,
        client_addr = excluded.client_addr, seen_at = excluded.seen_at, expires_at = excluded.expires_at,
        release = excluded.release, protocol = excluded.protocol
  RETURNING 1
), renewed AS (
  UPDATE ${schemaSql}.relay_leases l
     SET renewed_at = now(), expires_at = now() + ${ms(3)}
    FROM unnest($4::smallint[], $5::bigint[]) AS h(lane, epoch)
   WHERE l.lane = h.lane AND l.owner = $1 AND l.epoch = h.epoch
  RETURNING l.lane
), dropped AS (
  UPDATE ${schemaSql}.relay_leases l
     SET owner = NULL, expires_at = now()
   WHERE l.owner = $1 AND NOT (l.lane = ANY ($4::smallint[]))
  RETURNING l.lane
)
SELECT ${countsSql(schemaSql)},
       coalesce((SELECT array_agg(r.lane ORDER BY r.lane) FROM renewed r), '{}') AS lanes,
       (SELECT count(*)::int FROM beat) AS beat,
       (SELECT count(*)::int FROM dropped) AS dropped`;
}

/**
 * Takes up to `$5` lanes that are free, whose term ran out or whose owner's
 * connection is gone and whose fence has passed (`rule` says which), for `$1` with
 * the term `$2` ms, trying lanes from `$3` on (mod `$4`, the lane count) so
 * instances starting together do not all reach for the same ones. Each take
 * adds one to the lane's epoch. `prev` is the owner it was taken from (null
 * for a lane released or never held). SKIP LOCKED: two instances taking at
 * once get disjoint lanes and neither waits.
 *
 * An instance takes back its own lanes whose term ran out, under a new
 * epoch (its marks under the old one change nothing). It once left them
 * out: an instance whose renewals were late on a loaded machine lost its
 * lanes by its own clock, the other instance held its full share, and the
 * lanes stayed expired with no taker, 9,316 rows waiting, until a restart.
 * (A lane it holds now is never takeable: its term runs out in the
 * database only after this instance's clock has dropped it.)
 */
export function takeLeasesSql(schemaSql: string): string {
  return `WITH c AS (
  SELECT f.lane, f.owner AS prev, ${takeRule(schemaSql, 'f')} AS rule FROM ${schemaSql}.relay_leases f
   WHERE ${takeable(schemaSql, 'f')}
   ORDER BY (f.lane + $3::int) % $4::int
   LIMIT $5
   FOR UPDATE SKIP LOCKED
)
UPDATE ${schemaSql}.relay_leases l
   SET owner = $1, epoch = l.epoch + 1, renewed_at = now(), expires_at = now() + ${ms(2)}
  FROM c
 WHERE l.lane = c.lane
RETURNING l.lane, l.epoch::text AS epoch, c.prev, c.rule`;
}

/** Gives up lanes `$2` of `$1` at once (over its share, stopping, NATS unreachable): another instance takes them on its next poll. */
export function releaseLeasesSql(schemaSql: string): string {
  return `UPDATE ${schemaSql}.relay_leases SET owner = NULL, expires_at = now()
 WHERE owner = $1 AND lane = ANY ($2::smallint[])`;
}

/** A stopping instance leaves the live count at once. */
export function forgetInstanceSql(schemaSql: string): string {
  return `DELETE FROM ${schemaSql}.relay_instances WHERE instance = $1`;
}

/** Instances gone for a day (crashed, never stopped) are forgotten; `ferry status` shows the rest. */
export function pruneInstancesSql(schemaSql: string): string {
  return `DELETE FROM ${schemaSql}.relay_instances WHERE expires_at < now() - interval '1 day'`;
}

/**
 * Takes the session advisory locks that relays from before leases (outbox
 * migration 000010) took their lanes with: `$1` their namespace (FNV-1a of
 * `ferry:lanes:<schema>`), lanes 0 to `$2` - 1, less `$3`, those this session
 * holds already (a second grant of a session lock would need a second
 * unlock). Such a relay never reads relay_leases; one started beside a
 * relay holding these finds every lane taken and sends nothing. Returns the
 * lanes newly locked.
 */
export const LEGACY_LANE_LOCKS_SQL = `SELECT lane FROM generate_series(0, $2::int - 1) AS lane
 WHERE CASE WHEN lane = ANY ($3::int[]) THEN false ELSE pg_try_advisory_lock($1::int, lane) END`;

/** The lease statements of one schema, built once by each leaser. */
export interface LeaseStatements {
  counts: string;
  renew: string;
  take: string;
  release: string;
  forget: string;
  prune: string;
}

export function leaseStatements(schemaSql: string): LeaseStatements {
  return {
    counts: leaseCountsSql(schemaSql),
    renew: renewLeasesSql(schemaSql),
    take: takeLeasesSql(schemaSql),
    release: releaseLeasesSql(schemaSql),
    forget: forgetInstanceSql(schemaSql),
    prune: pruneInstancesSql(schemaSql),
  };
}
