// ferry doctor: the command, the findings collector and the database checks; the NATS checks are
// in doctor-nats.ts.
import {
  bossSchemaFor,
  describeValue,
  foreignTables,
  isConfigError,
  isNatsName,
  migrationStatus,
  OLD_BOSS_SCHEMA,
  quoteIdentifier,
} from '@ferry/core';
import { type ConsumerHealth, findParkedElsewhere, readInboxHealth } from '@ferry/inbox';
import type { NatsConnection } from '@nats-io/transport-node';
import { Command, InvalidArgumentError, Option } from 'commander';
import type pg from 'pg';
import { commandPool } from '../cli/database.js';
import { CLI_DEFAULTS } from '../cli/defaults.js';
import { parseIntIn, parseSchema } from '../cli/flag-parsers.js';
import { connectNats } from '../cli/nats-connection.js';
import { describeRelayBeforeLeases, describeRelease, relayInstances, relaysBeforeLeases, releaseMix } from '../cli/relay-instances.js';
import { addDatabaseOptions, addNatsOptions, addRetrySpanOptions } from '../cli/shared-options.js';
import type { CommandContext } from '../context.js';
import { count } from '../count.js';
import { EXIT, exitWith } from '../exit-codes.js';
import { RELAY_DEFAULTS, RELAY_LIMITS } from '../relay-options.js';
import { countDeadSql } from '../sql/count-dead.js';
import { outboxSubjectsSql } from '../sql/outbox-subjects.js';
import { SERVER_SETTINGS_SQL } from '../sql/server-settings.js';
import { checkNats } from './doctor-nats.js';
import type { Add, DoctorFlags, DoctorReport, Finding, FindingStatus } from './doctor-report.js';

export { type Add, type DoctorFlags, type DoctorReport, FINDING_STATUSES, type Finding, type FindingStatus } from './doctor-report.js';

const HELP_AFTER = `
Checks, each printed with its fix:
  postgres       reachable; idle_in_transaction_session_timeout set
  migrations     the outbox schema is at this Ferry's version
  relays         live relay instances and the release each runs (a mix, or one
                 below the schema's relay floor, is flagged); dead events waiting
  nats           reachable, JetStream enabled
  subjects       every distinct subject in the outbox is in a stream (scans the outbox)
  reserved subjects
                 no outbox subject is one NATS reserves ($JS.…, $SYS.…, _INBOX.…):
                 the relay never sends those
  stream NAME    exists (--stream), duplicate window >= the relay's retry span,
                 replicas and storage
  max_payload    the server's max_payload >= --max-payload-bytes and the largest event
  consumer NAME  (--consumer, repeatable) an inbox consumer: pull, explicit ack,
                 max_deliver unlimited (or above the inbox's maxDeliver), ack_wait
  parked         where an inbox of this schema keeps its tables: per consumer (those
                 named by --consumer, else all), parked events (a warning), failed
                 ones or keys waiting on a version nothing holds (a problem); and
                 nothing parked out of view (under --old-boss-schema, where earlier
                 releases parked, or counted in inbox_versions but missing from
                 --boss-schema)

Pass the relay's own --max-attempts/--backoff-base-ms/--backoff-max-ms/
--publish-timeout-ms/--poll-interval-ms (or the same FERRY_* variables) so the
retry span is the one your relays use: before each re-send, a PubAck timeout,
the backoff cap and a poll interval (about 22 minutes with the defaults).

Exit codes:
  0  no problem (warnings do not count)
  1  problems were found (the count is in the last line, or "problems" in --json)
  2  bad usage

Examples:
  ferry doctor
  ferry doctor --stream ORDERS --consumer billing --json`;

export function doctorCommand(ctx: CommandContext): Command {
  return addRetrySpanOptions(
    addNatsOptions(
      addDatabaseOptions(
        new Command('doctor').description('check the database, NATS, streams and consumers; print each finding with its fix'),
      ),
    ),
  )
    .addOption(
      new Option('--lease-term-ms <ms>', "the relays' lane lease term: a stream's duplicate window must cover it plus the publish timeout")
        .env('FERRY_LEASE_TERM_MS')
        .default(RELAY_DEFAULTS.leaseTermMs)
        .argParser(parseIntIn(...RELAY_LIMITS.leaseTermMs)),
    )
    .addOption(new Option('--stream <name>', 'also check this stream (repeatable)').argParser(collect))
    .addOption(new Option('--consumer <name>', 'check this inbox consumer on the stream(s) (repeatable)').argParser(collect))
    .addOption(
      new Option('--max-payload-bytes <n>', "the publisher's maxPayloadBytes")
        .default(CLI_DEFAULTS.maxPayloadBytes)
        .argParser(parseIntIn(1, 64 * 1024 * 1024)),
    )
    .addOption(
      new Option('--inbox-max-deliver <n>', "the inbox's maxDeliver (attempts before parking)")
        .default(CLI_DEFAULTS.inboxMaxDeliver)
        .argParser(parseIntIn(1, 10_000)),
    )
    .addOption(
      new Option('--boss-schema <name>', "the inbox's pg-boss schema, where its parked events are (default <schema>_boss)")
        .env('FERRY_BOSS_SCHEMA')
        .argParser(parseSchema),
    )
    .addOption(
      new Option('--old-boss-schema <name>', 'where earlier inbox releases parked: looked at for parked events out of view')
        .env('FERRY_OLD_BOSS_SCHEMA')
        .default(OLD_BOSS_SCHEMA)
        .argParser(parseSchema),
    )
    .addHelpText('after', HELP_AFTER)
    .action(async (flags: DoctorFlags) => {
      const report = await runDoctor(flags, ctx);
      if (flags.json) ctx.out(JSON.stringify(report));
      else {
        const tag = { ok: 'ok     ', warning: 'WARN   ', problem: 'PROBLEM', skipped: 'skipped' } as const;
        for (const f of report.findings) {
          ctx.out(`${tag[f.status]}  ${f.check}: ${f.message}`);
          if (f.fix) ctx.out(`         fix: ${f.fix}`);
        }
        ctx.out(`${count(report.problems, 'problem')}, ${count(report.warnings, 'warning')}`);
      }
      // 1, not the count: 2 problems must not read as bad usage (exit 2); the count is in the output.
      if (report.problems > 0) exitWith(EXIT.failure);
    });
}

/** A JetStream stream or consumer name (no whitespace, `.`, `*`, `>` or path separators), collected. */
function collect(value: string, previous: string[] = []): string[] {
  if (!isNatsName(value)) {
    throw new InvalidArgumentError(
      `${describeValue(value, 40)} is not a JetStream name: 1-255 characters, no whitespace, '.', '*', '>', '/' or '\\'`,
    );
  }
  return [...previous, value];
}

export async function runDoctor(flags: DoctorFlags, ctx: CommandContext): Promise<DoctorReport> {
  const findings: Finding[] = [];
  const add = (check: string, status: FindingStatus, message: string, fix?: string) =>
    findings.push({ check, status, message, ...(fix ? { fix } : {}) });
  const pool = commandPool(flags, ctx, 'ferry-doctor');
  let nc: NatsConnection | undefined;
  try {
    const subjects = await checkDatabase(pool, flags, add);
    try {
      nc = await connectNats(flags, 'ferry-doctor');
      add(
        'nats',
        'ok',
        `reachable at ${nc.getServer()} (nats-server ${nc.info?.version ?? '?'}, max_payload ${nc.info?.max_payload ?? '?'})`,
      );
    } catch (err) {
      // A NATS option that cannot work (a creds file that does not parse, conflicting credentials) is
      // no server's absence: its fix is the option, not starting NATS.
      const fix = isConfigError(err)
        ? `correct ${err.option} (or its FERRY_* variable); ferry doctor --help lists them`
        : 'start NATS with JetStream (nats-server -js), or pass --nats-url / FERRY_NATS_URL';
      add('nats', 'problem', (err as Error).message, fix);
    }
    if (nc) await checkNats(nc, pool, subjects, flags, add);
  } finally {
    await pool.end().catch(() => {});
    await nc?.close().catch(() => {});
  }
  return {
    problems: findings.filter((f) => f.status === 'problem').length,
    warnings: findings.filter((f) => f.status === 'warning').length,
    findings,
  };
}

/** Returns the outbox's distinct subjects with their counts, or undefined when they cannot be read. */
async function checkDatabase(pool: pg.Pool, flags: DoctorFlags, add: Add): Promise<Map<string, number> | undefined> {
  const schema = flags.schema;
  try {
    const { rows } = await pool.query<{ v: string; idle: string }>(SERVER_SETTINGS_SQL);
    add('postgres', 'ok', `reachable (PostgreSQL ${rows[0]?.v})`);
    if (rows[0]?.idle === '0') {
      add(
        'postgres',
        'warning',
        'idle_in_transaction_session_timeout is 0: a session left idle in a transaction holds back vacuum of the outbox and its row locks forever',
        "ALTER DATABASE <db> SET idle_in_transaction_session_timeout = '60s' (or per role)",
      );
    }
  } catch (err) {
    add(
      'postgres',
      'problem',
      `not reachable: ${(err as Error).message}`,
      'check --database-url / FERRY_DATABASE_URL, the network and the credentials',
    );
    add('migrations', 'skipped', 'PostgreSQL is not reachable');
    return undefined;
  }
  const foreign = await foreignTables(pool, schema);
  if (foreign.length > 0) {
    add(
      'migrations',
      'problem',
      `schema "${schema}" holds tables Ferry did not create (${foreign.join(', ')})`,
      'give Ferry a schema of its own with --schema (e.g. ferry); Ferry leaves those tables alone',
    );
    return undefined;
  }
  // Before the outbox checks: a consumer service's schema may hold the inbox's tables alone.
  await checkParked(pool, flags, add);
  const status = await migrationStatus(pool, { schema, set: 'outbox' });
  if (status.current === 0) {
    add('migrations', 'problem', `schema "${schema}" has no outbox tables`, `ferry migrate --schema ${schema}`);
    return undefined;
  }
  if (status.current < status.latest) {
    add(
      'migrations',
      'problem',
      `outbox schema "${schema}" is at version ${status.current}, this Ferry needs ${status.latest}`,
      `ferry migrate --schema ${schema}`,
    );
  } else if (status.current > status.latest) {
    add(
      'migrations',
      'problem',
      `outbox schema "${schema}" is at version ${status.current}, newer than this Ferry (${status.latest})`,
      'upgrade this ferry CLI to the version the relays run',
    );
  } else add('migrations', 'ok', `outbox schema "${schema}" is current (version ${status.current})`);
  const schemaSql = quoteIdentifier(schema);
  const [instances, dead, beforeLeases] = await Promise.all([
    relayInstances(pool, schema),
    pool.query<{ n: string }>(countDeadSql(schemaSql, 'all')),
    relaysBeforeLeases(pool, schema),
  ]);
  for (const old of beforeLeases) {
    add(
      'relays',
      'problem',
      `a relay from before lane leases holds lanes of "${schema}" by advisory lock: ${describeRelayBeforeLeases(old)}; it sends with its old rules beside the others`,
      'stop it (docs/operations.md, Upgrades)',
    );
  }
  if (instances.length === 0)
    add('relays', 'warning', `no relay instance is running for schema "${schema}"`, `ferry relay --schema ${schema}`);
  else {
    const below = instances.filter((i) => i.belowFloor);
    const mix = releaseMix(instances);
    const alive = `${count(instances.length, 'relay instance')} alive`;
    if (below.length > 0) {
      add(
        'relays',
        'problem',
        `${alive}; ${below.map((i) => `${i.instance} (${describeRelease(i)})`).join(', ')} below the schema's relay floor: a release older than the one that migrated "${schema}", refused every lane lease`,
        `stop ${below.length === 1 ? 'it' : 'them'} and run the current release (docs/operations.md, Upgrades)`,
      );
    } else if (mix !== null) {
      add(
        'relays',
        'warning',
        `${alive}, running different releases: ${mix}`,
        'finish the rollout so every relay runs one release (ferry status shows each)',
      );
    } else {
      const release = instances[0] ? describeRelease(instances[0]) : '';
      add('relays', 'ok', `${alive}, ${release} (${instances.map((i) => i.instance).join(', ')})`);
    }
  }
  const deadCount = Number(dead.rows[0]?.n ?? 0);
  if (deadCount > 0)
    add('relays', 'warning', `${deadCount} dead events block their keys`, 'ferry dlq list, then ferry dlq retry or discard');
  const subjects = await pool.query<{ subject: string; n: string }>(outboxSubjectsSql(schemaSql));
  return new Map(subjects.rows.map((r) => [r.subject, Number(r.n)]));
}

/**
 * Parked events an inbox of this schema would not see (ferry inbox parked list's check): under the
 * old pg-boss schema, or counted in inbox_versions but missing from the one in use. Only for a schema
 * holding the inbox's tables, and only for the consumers it knows (inbox_versions): park queues carry
 * no schema, and the old shared pg-boss schema holds every application's.
 */
async function checkParked(pool: pg.Pool, flags: DoctorFlags, add: Add): Promise<void> {
  const schemaSql = quoteIdentifier(flags.schema);
  const bossSchema = flags.bossSchema ?? bossSchemaFor(flags.schema);
  try {
    const { rows } = await pool.query<{ inbox: boolean; readable: boolean }>(
      `SELECT to_regclass($1) IS NOT NULL AS inbox,
              to_regclass($1) IS NOT NULL AND has_table_privilege(to_regclass($1), 'SELECT') AS readable`,
      [`${schemaSql}.inbox_versions`],
    );
    if (!rows[0]?.inbox) return;
    if (!rows[0].readable) {
      // A role of the relay's side (the reader, the relay) is not granted the inbox's tables: not a problem.
      add(
        'parked',
        'skipped',
        `this role may not read ${flags.schema}.inbox_versions: parked events not checked (run doctor as the inbox's role)`,
      );
      return;
    }
    const known = new Set(
      (await pool.query<{ consumer: string }>(`SELECT DISTINCT consumer FROM ${schemaSql}.inbox_versions`)).rows.map((r) => r.consumer),
    );
    const found = (
      await findParkedElsewhere(pool, { schema: flags.schema, bossSchema, oldBossSchemas: [flags.oldBossSchema ?? OLD_BOSS_SCHEMA] })
    ).filter((f) => known.has(f.consumer));
    const here = `--schema ${flags.schema} --consumer`;
    for (const f of found) {
      const first = f.elsewhere[0]?.bossSchema;
      if (first !== undefined) {
        const where = f.elsewhere.map((e) => `${e.jobs} in pg-boss schema "${e.bossSchema}"`).join(', ');
        add(
          'parked',
          'warning',
          `consumer ${f.consumer}: parked events outside pg-boss schema "${bossSchema}", where its inbox looks: ${where}`,
          f.fix ?? `ferry inbox parked list ${here} ${f.consumer} --boss-schema ${first}`,
        );
      } else {
        add(
          'parked',
          'warning',
          `consumer ${f.consumer}: inbox_versions counts ${f.counted} parked event(s), pg-boss schema "${bossSchema}" holds ${f.here}`,
          'pass the schema the inbox parks in (its bossSchema option) as --boss-schema',
        );
      }
    }
    const health = await readInboxHealth(pool, { schema: flags.schema, bossSchema });
    const named = new Set(flags.consumer ?? []);
    const held = (health?.consumers ?? []).filter((c) => named.size === 0 || named.has(c.consumer));
    for (const c of held) addConsumerParked(c, flags.schema, add);
    if (found.length === 0 && held.length === 0) {
      const whose = named.size === 0 ? 'no consumer has' : `${[...named].join(', ')}: no`;
      add('parked', 'ok', `${whose} parked events, in pg-boss schema "${bossSchema}" or elsewhere`);
    }
  } catch (err) {
    add('parked', 'skipped', `could not look for parked events: ${(err as Error).message}`);
  }
}

/**
 * One consumer's parked events: a problem when any failed (each holds its key until retried or
 * discarded) or a key waits on a version nothing holds (it never moves by itself); a warning while
 * they only wait for the park worker's retries.
 */
function addConsumerParked(c: ConsumerHealth, schema: string, add: Add): void {
  const parts = [count(c.parked, 'parked event'), `${c.failedParked} failed`];
  if (c.keysWaitingOnMissingVersion > 0)
    parts.push(`${count(c.keysWaitingOnMissingVersion, 'key waits', 'keys wait')} on a version nothing holds`);
  const stuck = c.failedParked > 0 || c.keysWaitingOnMissingVersion > 0;
  add(
    'parked',
    stuck ? 'problem' : 'warning',
    `consumer ${c.consumer}: ${parts.join(', ')}${stuck ? ': their keys are held until someone acts' : ': the park worker retries them'}`,
    `ferry inbox parked list --schema ${schema} --consumer ${c.consumer}, then retry or discard them (ferry inbox parked --help)`,
  );
}
