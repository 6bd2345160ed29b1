import type { ContractRegistry } from '@ferry/contracts';
import { shellQuote } from '../shell-quote.js';
import { type CompatRule, compareSchemas } from './compat.js';
import { sameJson } from './json-schema.js';
import type { Snapshot, SnapshotContract } from './snapshot.js';

/** One breaking change of a published version, with what to do about it. */
export interface CheckFinding {
  readonly type: string;
  readonly version: number;
  /** Where in `data` (`total.currency`); empty for the contract as a whole. */
  readonly path: string;
  readonly rule: CompatRule;
  readonly detail: string;
  readonly fix: string;
}

/** What `ferry contracts check` found. */
export interface CheckReport {
  readonly breaking: readonly CheckFinding[];
  /** Versions the registry has and the snapshot lacks (`OrderPlaced v3`). */
  readonly added: readonly string[];
  /** Versions whose schema or description changed compatibly. */
  readonly changed: readonly string[];
  /** The snapshot differs from what `ferry contracts snapshot` would write now. */
  readonly behind: boolean;
  /** The command that refreshes the snapshot. */
  readonly refresh: string;
}

const key = (c: { type: string; version: number }) => `${c.type}\u0000${c.version}`;
const name = (c: { type: string; version: number }) => `${JSON.stringify(c.type)} v${c.version}`;

/**
 * Compare the registry's contracts (`current`, as `buildSnapshot` makes them)
 * with a snapshot under the BACKWARD rule: every version in the snapshot must
 * still be in the registry, and data valid under its snapshot schema must stay
 * valid, with the same meaning, under its registry schema.
 */
export function checkAgainst(
  snapshot: Snapshot,
  current: Snapshot,
  registry: ContractRegistry,
  args: { registry: string; against: string },
): CheckReport {
  const refresh = `ferry contracts snapshot --registry ${shellQuote(args.registry)} --out ${shellQuote(args.against)}`;
  const now = new Map<string, SnapshotContract>(current.contracts.map((c) => [key(c), c]));
  const was = new Map<string, SnapshotContract>(snapshot.contracts.map((c) => [key(c), c]));
  const breaking: CheckFinding[] = [];
  const changed: string[] = [];
  const fixFor = (c: SnapshotContract, rule: CompatRule) => {
    const next = (registry.latest(c.type)?.version ?? c.version) + 1;
    const neverPublished = `if ${name(c)} was never published, refresh the snapshot instead: ${refresh}`;
    if (rule === 'version-removed')
      return `put ${name(c)} back in the registry (its events are in the streams, and consumers upcast from it); ${neverPublished}`;
    if (rule === 'dataschema-changed')
      return `keep ${name(c)}'s ce-dataschema ${JSON.stringify(c.dataschema)} (its events carry it, and a consumer finds their contract by it): restore the registry's dataschema template; ${neverPublished}`;
    return `keep ${name(c)} as the snapshot has it and publish the new shape as v${next}, with upcast: (v${next - 1}Data) => v${next}Data on v${next - 1}; ${neverPublished}`;
  };
  for (const old of snapshot.contracts) {
    const cur = now.get(key(old));
    if (!cur) {
      const left = registry.versions(old.type).length;
      breaking.push({
        type: old.type,
        version: old.version,
        path: '',
        rule: 'version-removed',
        detail:
          left === 0
            ? `the registry has no ${JSON.stringify(old.type)} at all`
            : `the registry has ${JSON.stringify(old.type)} v1..v${left}`,
        fix: fixFor(old, 'version-removed'),
      });
      continue;
    }
    if (cur.dataschema !== old.dataschema) {
      breaking.push({
        type: old.type,
        version: old.version,
        path: '',
        rule: 'dataschema-changed',
        detail: `ce-dataschema was ${JSON.stringify(old.dataschema)}, now ${JSON.stringify(cur.dataschema)}`,
        fix: fixFor(old, 'dataschema-changed'),
      });
    }
    for (const change of compareSchemas(old.jsonSchema, cur.jsonSchema)) {
      breaking.push({ type: old.type, version: old.version, ...change, fix: fixFor(old, change.rule) });
    }
    if (!sameJson(old.jsonSchema, cur.jsonSchema) || old.description !== cur.description || old.subject !== cur.subject) {
      changed.push(`${old.type} v${old.version}`);
    }
  }
  const added = current.contracts.filter((c) => !was.has(key(c))).map((c) => `${c.type} v${c.version}`);
  return { breaking, added, changed, behind: added.length > 0 || changed.length > 0, refresh };
}

/** The report as the terminal shows it: one block per breaking change (what, where, which rule, the fix), then the verdict. */
export function formatReport(report: CheckReport, against: string): string[] {
  const lines: string[] = [];
  if (report.breaking.length > 0) {
    const proved = report.breaking.filter((f) => f.rule !== 'cannot-prove').length;
    const unproved = report.breaking.length - proved;
    lines.push(
      `ferry contracts check: ${[proved ? `${proved} breaking change${proved > 1 ? 's' : ''}` : '', unproved ? `${unproved} change${unproved > 1 ? 's' : ''} it cannot prove compatible` : ''].filter(Boolean).join(' and ')} against ${against}`,
      '(BACKWARD rule: data valid under the snapshot must stay valid, and keep its meaning, under the registry)',
    );
    // One fix line under the changes it fixes (every change of one version has the same).
    report.breaking.forEach((f, i) => {
      const where = f.path ? `, field ${f.path}` : '';
      const rule = f.rule === 'cannot-prove' ? 'cannot-prove (cannot prove compatible)' : f.rule;
      lines.push(`  ${f.type} v${f.version}${where}, rule ${rule}: ${f.detail}`);
      if (report.breaking[i + 1]?.fix !== f.fix) lines.push(`    fix: ${f.fix}`);
    });
    return lines;
  }
  if (!report.behind) {
    lines.push(`ferry contracts check: every contract matches ${against}`);
    return lines;
  }
  const parts = [
    report.added.length ? `new: ${report.added.join(', ')}` : '',
    report.changed.length ? `changed compatibly: ${report.changed.join(', ')}` : '',
  ].filter(Boolean);
  lines.push(
    `ferry contracts check: compatible with ${against} (${parts.join('; ')})`,
    `the snapshot is behind the registry: once these versions are published, refresh it with ${report.refresh}`,
  );
  return lines;
}
