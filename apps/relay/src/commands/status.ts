import { bossSchemaFor, laneCountSql, quoteIdentifier } from '@ferry/core';
import { type InboxHealth, readInboxHealth } from '@ferry/inbox';
import { Command, Option } from 'commander';
import { commandPool, requireOutbox } from '../cli/database.js';
import { parseIntIn, parseSchema } from '../cli/flag-parsers.js';
import { describeRelayBeforeLeases, describeRelease, relayInstances, relaysBeforeLeases, releaseMix } from '../cli/relay-instances.js';
import { addDatabaseOptions, type DatabaseFlags } from '../cli/shared-options.js';
import { DEFAULT_INBOX_LIMITS, INBOX_LIMIT_FLAGS, type InboxLimits, statusAttention } from '../cli/status-check.js';
import type { CommandContext } from '../context.js';
import { count } from '../count.js';
import { NotMigratedError } from '../errors.js';
import { EXIT, exitWith } from '../exit-codes.js';
import { type BlockedKeyRow, blockedKeysSql, toBlockedKey } from '../sql/blocked-keys.js';
import { countBlockedKeysSql } from '../sql/count-blocked-keys.js';
import { laneBacklogSql } from '../sql/lane-backlog.js';
import { publishedRecentlySql } from '../sql/published-recently.js';
import { type LaneLeaseRow, laneLeasesSql } from '../sql/relay-instances.js';
import type { LaneStatus, StatusReport } from './status-report.js';

export type { LaneStatus, StatusReport } from './status-report.js';

/** Blocked keys listed by `ferry status` at most. */
const BLOCKED_SHOWN = 20;

const HELP_AFTER = `
Pending = unpublished and not dead. Lanes come from the outbox settings; each
live relay instance holds a lease with a term per lane (relay_leases) and
renews it every third of the term: a lane whose owner let the term pass is
shown as overdue (frozen, cut off or stuck), and a live instance takes it on
its next poll.

When the schema also holds inbox tables (or only them: a consumer's
database), status lists every running inbox (its consumer, release and last
heartbeat; one that stopped beating shows STALE) and, per consumer, its parked
events, the failed ones, and the sequential keys waiting on a version that
nothing holds (the next version is neither early nor parked, a later one is
parked: it never applies by itself). The parking lot is read in --boss-schema.

Exit codes:
  0  the status was read (with --check: and nothing needs a person)
  1  PostgreSQL unreachable, or the schema is not migrated; with --check also
     when something needs a person: dead events, keys blocked behind a failed
     event, lanes with pending events and no live relay, relay instances
     below the schema's relay floor or from before lane leases, and per inbox
     consumer more parked events, failed parked events or keys waiting on a
     missing version than --max-parked, --max-failed-parked and
     --max-waiting-keys allow (each 0 by default; named on stderr)
  2  bad usage

Examples:
  ferry status --database-url postgres://ops@db/app
  ferry status --json | jq '.lanes[] | select(.pending > 0)'
  ferry status --check || page-someone   # in cron or a probe
  ferry status --check --max-parked 10   # page at the 11th parked event of a consumer`;

/**
 * `ferry status`'s numbers. `publishedLastMinute: false` leaves that count out (0 in the report): it
 * reads every row published in the last minute, hundreds of thousands during a drain, and the console
 * takes the figure from its per-minute chart instead, which reads each minute once.
 */
export async function readStatus(
  pool: import('pg').Pool,
  schema: string,
  { publishedLastMinute = true, bossSchema }: { publishedLastMinute?: boolean; bossSchema?: string } = {},
): Promise<StatusReport> {
  let inbox: InboxHealth | null = null;
  try {
    await requireOutbox(pool, schema);
  } catch (err) {
    // A consumer's database holds the inbox's tables alone: its status is the inbox part.
    if (!(err instanceof NotMigratedError)) throw err;
    inbox = await readInboxHealth(pool, { schema, bossSchema: bossSchema ?? bossSchemaFor(schema) });
    if (inbox === null) throw err;
    return {
      ...EMPTY_OUTBOX,
      schema,
      lanes: [],
      instances: [],
      relaysBeforeLeases: [],
      unownedLanesWithBacklog: [],
      blocked: [],
      inboxOnly: true,
      inbox,
    };
  }
  inbox = await readInboxHealth(pool, { schema, bossSchema: bossSchema ?? bossSchemaFor(schema) });
  const schemaSql = quoteIdentifier(schema);
  const [settings, perLane, recent, instances, blocked, blockedCount, leases, beforeLeases] = await Promise.all([
    pool.query<{ value: string }>(laneCountSql(schemaSql)),
    pool.query<{ lane: number; pending: string; dead: string; oldest: number }>(laneBacklogSql(schemaSql)),
    publishedLastMinute ? pool.query<{ n: string }>(publishedRecentlySql(schemaSql)) : { rows: [{ n: '0' }] },
    relayInstances(pool, schema),
    pool.query<BlockedKeyRow>(blockedKeysSql(schemaSql), [BLOCKED_SHOWN]),
    pool.query<{ n: number }>(countBlockedKeysSql(schemaSql)),
    pool.query<LaneLeaseRow>(laneLeasesSql(schemaSql)),
    relaysBeforeLeases(pool, schema),
  ]);
  const laneCount = Number(settings.rows[0]?.value ?? 0);
  const byLease = new Map(leases.rows.map((r) => [r.lane, r]));
  const byLane = new Map(perLane.rows.map((r) => [r.lane, r]));
  const lanes: LaneStatus[] = [];
  for (let lane = 0; lane < laneCount; lane++) {
    const r = byLane.get(lane);
    const lease = byLease.get(lane);
    lanes.push({
      lane,
      pending: Number(r?.pending ?? 0),
      dead: Number(r?.dead ?? 0),
      oldestPendingSeconds: round3(r?.oldest ?? 0),
      owner: lease?.owner ?? null,
      leaseAgeSeconds: lease?.owner && lease.age !== null ? round3(lease.age) : null,
      epoch: lease?.epoch ?? '0',
      overdue: lease?.overdue ?? false,
    });
  }
  return {
    schema,
    laneCount,
    pending: lanes.reduce((a, l) => a + l.pending, 0),
    dead: lanes.reduce((a, l) => a + l.dead, 0),
    oldestPendingSeconds: Math.max(0, ...lanes.map((l) => l.oldestPendingSeconds)),
    publishedLastMinute: Number(recent.rows[0]?.n ?? 0),
    lanes,
    instances,
    mixedReleases: releaseMix(instances),
    relaysBeforeLeases: beforeLeases,
    unownedLanesWithBacklog: lanes.filter((l) => l.pending > 0 && (l.owner === null || l.overdue)).map((l) => l.lane),
    blockedKeys: blockedCount.rows[0]?.n ?? 0,
    blocked: blocked.rows.map(toBlockedKey),
    inboxOnly: false,
    inbox,
  };
}

/** The outbox part of a status of a schema with no outbox. */
const EMPTY_OUTBOX = {
  laneCount: 0,
  pending: 0,
  dead: 0,
  oldestPendingSeconds: 0,
  publishedLastMinute: 0,
  mixedReleases: null,
  blockedKeys: 0,
} as const;

const round3 = (x: number) => Math.round(x * 1000) / 1000;

export function formatAge(seconds: number): string {
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 120) return `${seconds.toFixed(1)} s`;
  if (seconds < 7200) return `${(seconds / 60).toFixed(1)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

function printStatus(r: StatusReport, out: (line: string) => void): void {
  if (r.inboxOnly) {
    out(`schema ${r.schema}: inbox tables only (no outbox)`);
    if (r.inbox) printInbox(r.inbox, out);
    return;
  }
  out(`schema ${r.schema}: ${count(r.laneCount, 'lane')}`);
  out(
    `pending ${r.pending}, oldest ${formatAge(r.oldestPendingSeconds)}, dead ${r.dead}, published in the last minute ${r.publishedLastMinute}`,
  );
  out(`relay instances alive: ${r.instances.length}`);
  for (const i of r.instances) {
    const where = i.relayPid === null ? `backend pid=${i.pid}` : `pid ${i.relayPid} on ${i.host ?? '?'}`;
    out(
      `  ${i.instance}  ${describeRelease(i)}  ${where} from ${i.clientAddr ?? 'local socket'} since ${i.since ?? '?'}  lanes ${i.lanes.length ? i.lanes.join(',') : '(none)'}${i.belowFloor ? '  BELOW FLOOR' : ''}`,
    );
  }
  if (r.mixedReleases !== null) out(`warning: relay instances run different releases: ${r.mixedReleases}`);
  for (const old of r.relaysBeforeLeases) {
    out(
      `warning: a relay from before lane leases holds lanes by advisory lock: ${describeRelayBeforeLeases(old)}; it sends with its old rules beside the others: stop it (docs/operations.md, Upgrades)`,
    );
  }
  const below = r.instances.filter((i) => i.belowFloor);
  if (below.length > 0) {
    out(
      `warning: ${below.map((i) => i.instance).join(', ')} ${below.length === 1 ? 'is' : 'are'} below the schema's relay floor: refused every lane lease; stop ${below.length === 1 ? 'it' : 'them'} (docs/operations.md, Upgrades)`,
    );
  }
  const busy = r.lanes.filter((l) => l.pending > 0 || l.dead > 0 || l.overdue);
  if (busy.length > 0) {
    out('lane  pending  dead  oldest      owner     epoch  lease age');
    for (const l of busy) {
      const age = l.leaseAgeSeconds === null ? '-' : formatAge(l.leaseAgeSeconds);
      out(
        `${String(l.lane).padStart(4)}  ${String(l.pending).padStart(7)}  ${String(l.dead).padStart(4)}  ${formatAge(l.oldestPendingSeconds).padEnd(10)}  ${(l.owner ?? '-').padEnd(8)}  ${l.epoch.padStart(5)}  ${age}${l.overdue ? '  OVERDUE' : ''}`,
      );
    }
  }
  const overdue = r.lanes.filter((l) => l.overdue);
  if (overdue.length > 0) {
    const owners = [...new Set(overdue.map((l) => l.owner))].join(', ');
    out(
      `warning: ${count(overdue.length, 'lane')} overdue: owner ${owners} did not renew within its lease term (frozen, cut off or stuck); a live relay takes them on its next poll`,
    );
  }
  if (r.unownedLanesWithBacklog.length > 0) {
    out(`warning: lanes ${r.unownedLanesWithBacklog.join(',')} have pending events and no relay: start ferry relay`);
  }
  for (const b of r.blocked) {
    const state = b.state === 'dead' ? 'dead' : `backing off, attempt ${b.attempts}, next at ${b.nextAttemptAt}`;
    const waiting = `${b.waiting} ${b.waiting === 1 ? 'event waits' : 'events wait'} behind it`;
    out(`blocked key ${b.key}: version ${b.version} (${b.id}) ${state}; ${waiting}; ${b.reason ?? ''}`);
  }
  if (r.blockedKeys > r.blocked.length) out(`… and ${count(r.blockedKeys - r.blocked.length, 'more blocked key')} (ferry status --json)`);
  if (r.dead > 0) out(`warning: ${count(r.dead, 'dead event blocks its key', 'dead events block their keys')}: see ferry dlq list`);
  if (r.inbox) printInbox(r.inbox, out);
}

/** The inbox part: each running inbox, then each consumer with parked events or keys waiting on a missing version. */
function printInbox(h: InboxHealth, out: (line: string) => void): void {
  const live = h.instances.filter((i) => !i.stale);
  out(
    `inbox instances alive: ${live.length}${live.length === h.instances.length ? '' : ` (and ${h.instances.length - live.length} stale)`}`,
  );
  for (const i of h.instances) {
    out(
      `  ${i.instance}  consumer ${i.consumer}  release ${i.release}  ${i.mode} on stream ${i.stream}  pid ${i.pid ?? '?'} on ${i.host ?? '?'}  last heartbeat ${formatAge(i.lastHeartbeatAgeSeconds)} ago${i.stale ? '  STALE (stopped beating: killed, frozen or cut off)' : ''}`,
    );
  }
  for (const c of h.consumers) {
    const parts = [count(c.parked, 'parked event'), `${c.failedParked} failed`];
    if (c.keysWaitingOnMissingVersion > 0) {
      parts.push(`${count(c.keysWaitingOnMissingVersion, 'key waits', 'keys wait')} on a version nothing holds`);
    }
    out(`warning: consumer ${c.consumer}: ${parts.join(', ')}: ferry inbox parked list --consumer ${c.consumer}`);
  }
  if (h.note) out(`note: ${h.note}`);
}

interface StatusFlags extends DatabaseFlags, InboxLimits {
  check?: boolean;
  bossSchema?: string;
}

export function statusCommand(ctx: CommandContext): Command {
  const cmd = addDatabaseOptions(
    new Command('status').description(
      'backlog per lane, oldest pending age, dead events, events published in the last minute, live relays and their lanes',
    ),
  )
    .option('--check', 'exit 1 when something needs a person: dead events, blocked keys, lanes without a live relay, parked inbox events')
    .addOption(
      new Option('--boss-schema <name>', "the inboxes' pg-boss schema, where their parked events are (default <schema>_boss)")
        .env('FERRY_BOSS_SCHEMA')
        .argParser(parseSchema),
    );
  for (const [name, [flags, env, help]] of Object.entries(INBOX_LIMIT_FLAGS) as [keyof InboxLimits, readonly [string, string, string]][]) {
    cmd.addOption(new Option(flags, help).env(env).default(DEFAULT_INBOX_LIMITS[name]).argParser(parseIntIn(0, 1_000_000_000)));
  }
  return cmd.addHelpText('after', HELP_AFTER).action(async (flags: StatusFlags) => {
    const pool = commandPool(flags, ctx, 'ferry-status');
    try {
      const report = await readStatus(pool, flags.schema, flags.bossSchema ? { bossSchema: flags.bossSchema } : {});
      if (flags.json) ctx.out(JSON.stringify(report));
      else printStatus(report, ctx.out);
      const attention = flags.check ? statusAttention(report, flags) : [];
      if (attention.length > 0) {
        ctx.err(`ferry status --check: needs a person: ${attention.join('; ')}`);
        exitWith(EXIT.failure);
      }
    } finally {
      await pool.end();
    }
  });
}
