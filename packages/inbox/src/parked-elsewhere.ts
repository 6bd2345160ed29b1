import { bossSchemaFor, OLD_BOSS_SCHEMA, type Queryable, quoteIdentifier, validateIdentifier } from '@ferry/core';
import { parkQueueName } from './options.js';
import { inboxTablesExist } from './sql/inbox-tables.js';

/** A consumer whose parked events are not (all) where its inbox looks for them. */
export interface ParkedElsewhere {
  readonly consumer: string;
  /** The pg-boss schema the inbox (or the command) uses. */
  readonly bossSchema: string;
  /** Live parked jobs of the consumer there. */
  readonly here: number;
  /** Parked events `inbox_versions.parked` counts for the consumer (kept in `sequential` mode). */
  readonly counted: number;
  /** Other pg-boss schemas holding live parked jobs of the consumer. */
  readonly elsewhere: ReadonlyArray<{ readonly bossSchema: string; readonly jobs: number }>;
  /** Where they are and what to do, in one line. */
  readonly advice: string;
  /** The command that fixes it, when one does: `ferry inbox parked move …` for each other schema. */
  readonly fix?: string;
}

/** The command that moves a consumer's parked jobs from `from` into the pg-boss schema its inbox works. */
export function moveCommand(schema: string, bossSchema: string, from: string, consumer: string): string {
  const to = bossSchema === bossSchemaFor(schema) ? '' : ` --boss-schema ${bossSchema}`;
  return `ferry inbox parked move --from-boss-schema ${from} --consumer ${consumer} --schema ${schema}${to}`;
}

export interface FindParkedElsewhereOptions {
  /** The schema of the inbox tables. */
  schema: string;
  /** The pg-boss schema in use. */
  bossSchema: string;
  /** One consumer; every consumer with parked events when omitted. */
  consumer?: string;
  /** Where else to look: by default `pgboss`, where inbox releases before `<schema>_boss` parked. */
  oldBossSchemas?: readonly string[];
}

const PARK_QUEUE = /^ferry\.inbox\.([a-z_][a-z0-9_]{0,62})\.parked$/;

/** Live parked jobs per consumer in one pg-boss schema; empty when it has no pg-boss (or may not be read). */
async function parkedJobs(q: Queryable, bossSchema: string, consumer: string | undefined): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  const table = `${quoteIdentifier(bossSchema)}.job`;
  try {
    const { rows: exists } = await q.query<{ t: string | null }>('SELECT to_regclass($1)::text AS t', [table]);
    if (!exists[0]?.t) return out;
    const { rows } = await q.query<{ name: string; n: number }>(
      `SELECT name, count(*)::int AS n FROM ${table}
        WHERE ${consumer === undefined ? `name LIKE 'ferry.inbox.%.parked'` : 'name = $1'} AND state IN ('created', 'retry', 'active', 'failed')
        GROUP BY name`,
      consumer === undefined ? [] : [parkQueueName(consumer)],
    );
    for (const r of rows) {
      const c = PARK_QUEUE.exec(r.name)?.[1];
      if (c !== undefined) out.set(c, r.n);
    }
  } catch {
    // A schema this role may not read is not where its inbox parks: nothing to report from it.
  }
  return out;
}

/**
 * Finds parked events an inbox would not see: parked under an old pg-boss
 * schema (`pgboss`, the default of earlier releases), or counted in
 * `inbox_versions.parked` but missing from the pg-boss schema in use. Returns
 * one finding per such consumer, none when everything parked is in view.
 *
 * @example
 * for (const f of await findParkedElsewhere(pool, { schema: 'ferry', bossSchema: 'ferry_boss' })) console.warn(f.advice);
 */
export async function findParkedElsewhere(q: Queryable, options: FindParkedElsewhereOptions): Promise<ParkedElsewhere[]> {
  const bossSchema = validateIdentifier(options.bossSchema, 'bossSchema');
  const consumer = options.consumer === undefined ? undefined : validateIdentifier(options.consumer, 'consumer');
  const olds = [...new Set(options.oldBossSchemas ?? [OLD_BOSS_SCHEMA])]
    .map((s) => validateIdentifier(s, 'oldBossSchema'))
    .filter((s) => s !== bossSchema);
  const counted = new Map<string, number>();
  if (await inboxTablesExist(q, options.schema)) {
    const { rows } = await q.query<{ consumer: string; n: number }>(
      `SELECT consumer, sum(parked)::int AS n FROM ${quoteIdentifier(options.schema)}.inbox_versions
        WHERE parked > 0${consumer === undefined ? '' : ' AND consumer = $1'} GROUP BY consumer`,
      consumer === undefined ? [] : [consumer],
    );
    for (const r of rows) counted.set(r.consumer, r.n);
  }
  const here = await parkedJobs(q, bossSchema, consumer);
  const other = new Map<string, Array<{ bossSchema: string; jobs: number }>>();
  for (const old of olds) {
    for (const [c, jobs] of await parkedJobs(q, old, consumer)) {
      other.set(c, [...(other.get(c) ?? []), { bossSchema: old, jobs }]);
    }
  }
  const findings: ParkedElsewhere[] = [];
  for (const c of [...new Set([...counted.keys(), ...other.keys()])].sort()) {
    const n = counted.get(c) ?? 0;
    const found = here.get(c) ?? 0;
    const elsewhere = other.get(c) ?? [];
    if (elsewhere.length === 0 && n <= found) continue;
    let advice: string;
    let fix: string | undefined;
    if (elsewhere.length > 0) {
      const where = elsewhere.map((e) => `${e.jobs} in pg-boss schema "${e.bossSchema}"`).join(', ');
      fix = elsewhere.map((e) => moveCommand(options.schema, bossSchema, e.bossSchema, c)).join('; then ');
      advice = `consumer ${c}: parked events outside pg-boss schema "${bossSchema}", where this inbox looks: ${where} (earlier Ferry releases parked in "${OLD_BOSS_SCHEMA}"), where no inbox works them. Move them here, in order, once: ${fix} (--dry-run first shows them; an inbox may keep running)`;
    } else {
      advice = `consumer ${c}: inbox_versions counts ${n} parked event(s) but pg-boss schema "${bossSchema}" holds ${found}${
        olds.length > 0 ? ` (and ${olds.map((s) => `"${s}"`).join(', ')} none)` : ''
      }: pass the schema the inbox parked them in (its bossSchema option) as --boss-schema`;
    }
    findings.push({ consumer: c, bossSchema, here: found, counted: n, elsewhere, advice, ...(fix ? { fix } : {}) });
  }
  return findings;
}
