import { createHash, type Hash } from 'node:crypto';
import { CommandFailedError } from '../errors.js';

// What an operator confirmed, as the server can check it again: the selection's ids in their order
// (seq order for outbox rows, the parking lot's order for parked jobs) reduced to a digest. The
// preview and the change compute it with this one function, in the console and the CLI alike, so a
// confirmation changes exactly the rows the preview showed or nothing at all (issue 42, item 3:
// rows A, C, B, where A was shown and went, and C was never shown, must not pass for A, B).

/** A selection as a preview shows it and a confirmation carries it. */
export interface Selection {
  /** How many rows. */
  rows: number;
  /** sha256 (hex) over the ordered ids, each lowercased and ended by a newline. */
  digest: string;
}

/** What a confirmation carries: the digest, and the count when the confirmation showed one (for the refusal's message). */
export interface ExpectedSelection {
  digest: string;
  rows?: number;
}

/** Builds a Selection one id at a time, so a large one is hashed as it is read. */
export class SelectionHasher {
  #hash: Hash = createHash('sha256');
  #rows = 0;

  add(id: string): void {
    this.#hash.update(`${id.toLowerCase()}\n`);
    this.#rows++;
  }

  /** The selection so far (the hasher is spent afterwards). */
  selection(): Selection {
    return { rows: this.#rows, digest: this.#hash.digest('hex') };
  }
}

/** The Selection of these ids, in this order. */
export function selectionOf(ids: Iterable<string>): Selection {
  const h = new SelectionHasher();
  for (const id of ids) h.add(id);
  return h.selection();
}

/** Whether the selection found now is the one confirmed: the same rows in the same order (the digest covers the count). */
export function sameSelection(confirmed: ExpectedSelection, now: Selection): boolean {
  return confirmed.digest === now.digest && (confirmed.rows === undefined || confirmed.rows === now.rows);
}

/** The Selection of ids that have no order of their own (parked jobs named by id): sorted first. */
export function selectionOfSet(ids: Iterable<string>): Selection {
  return selectionOf([...ids].map((id) => id.toLowerCase()).sort());
}

const DIGEST = /^[0-9a-f]{64}$/;

/** A digest as a form or flag carries it, or undefined when it is not one. */
export function parseDigest(v: unknown): string | undefined {
  return typeof v === 'string' && DIGEST.test(v) ? v : undefined;
}

/** Ids an audit row names at most (3.7 MB of jsonb); past this it holds the count, the digest and the first and last id. */
export const AUDIT_IDS_MAX = 100_000;

/** How the audit trail names the rows an action changed. */
export interface AuditedSelection extends Selection {
  /** Every id, in order, up to AUDIT_IDS_MAX of them. */
  ids?: string[];
  /** Past AUDIT_IDS_MAX: the first and last id, the ids themselves left out (a jsonb value holds at most 255 MB). */
  first?: string;
  last?: string;
  idsOmitted?: number;
}

/**
 * The audit trail's record of the rows an action changed: their count and digest, and the ids
 * themselves, in order, so the trail says which rows and not only how many. Past AUDIT_IDS_MAX
 * the ids are left out (docs/console.md says where they can be found again: a discard's rows by
 * the stamp in their last_error, a replay's copies by their Nats-Msg-Id suffix).
 */
export function auditSelection(ids: readonly string[]): AuditedSelection {
  const { rows, digest } = selectionOf(ids);
  if (ids.length <= AUDIT_IDS_MAX) return { rows, digest, ids: [...ids] };
  return { rows, digest, first: ids[0] as string, last: ids.at(-1) as string, idsOmitted: ids.length };
}

/** The selection changed between the preview and the confirmation: nothing was done. */
export class SelectionChangedError extends CommandFailedError {
  constructor(
    readonly expected: number | undefined,
    readonly found: number,
    what = 'failed row(s)',
  ) {
    super(
      expected === undefined
        ? `nothing done: the selection changed since it was previewed: ${found} ${what} match now, not the ones previewed: preview again`
        : expected === found
          ? `nothing done: the selection changed since the preview: ${found} ${what} match again, but not the same ones: preview again`
          : `nothing done: the preview selected ${expected} ${what}, now ${found} match: preview again`,
    );
    this.name = 'SelectionChangedError';
  }
}
