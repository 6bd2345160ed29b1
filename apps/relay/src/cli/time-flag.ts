import { describeValue } from '@ferry/core';
import { InvalidArgumentError } from 'commander';
import { parseDuration } from '../duration.js';

/** An ISO 8601 date-time with its zone: Z or an offset. */
const ZONED_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})$/i;
/** A relative time: a duration back from now (`10m`, `2h`, `1d`), as every duration flag writes it. */
const RELATIVE = /^\d+(ms|s|m|h|d)$/;

/**
 * A `--since`/`--until` value: an ISO 8601 time with its zone, or a duration
 * back from now (`10m` = ten minutes ago), resolved once, when the command
 * starts. Throws commander's InvalidArgumentError (exit 2) naming both forms.
 */
export function parseTimeFlag(value: string): Date {
  const text = value.trim();
  if (RELATIVE.test(text)) return new Date(Date.now() - parseDuration(text));
  const d = new Date(text);
  if (!ZONED_TIME.test(text) || Number.isNaN(d.getTime())) {
    // Without a zone, JavaScript reads a date-time in the host's local time (and a bare date in
    // UTC): the same command selected 0 events under TZ=America/New_York and 5 under UTC.
    throw new InvalidArgumentError(
      `${describeValue(value, 40)} is neither an ISO 8601 time with a zone nor a time back from now: use e.g. 2026-11-29T21:00:00Z, 2026-11-29T22:00:00+01:00, or 10m, 2h, 1d (ago)`,
    );
  }
  return d;
}
