import { describeValue } from '@ferry/core';
import { InvalidArgumentError } from 'commander';

const DURATION = /^(\d+)(ms|s|m|h|d)$/;
const DURATION_UNITS_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
/** The longest duration a flag accepts: ten years. */
const MAX_DURATION_MS = 3650 * 86_400_000;

/**
 * `7d`, `12h`, `30m`, `45s`, `500ms` → milliseconds: the one duration syntax of every flag
 * (`--retention`, `--timeout`). Throws commander's InvalidArgumentError (exit 2).
 */
export function parseDuration(value: string): number {
  const m = DURATION.exec(value.trim());
  const ms = m ? Number(m[1]) * DURATION_UNITS_MS[m[2] as keyof typeof DURATION_UNITS_MS] : Number.NaN;
  if (!m || !Number.isSafeInteger(ms) || ms > MAX_DURATION_MS) {
    throw new InvalidArgumentError(
      `${describeValue(value, 40)} is not a duration: use a whole number with ms, s, m, h or d, e.g. 7d or 12h`,
    );
  }
  return ms;
}

/**
 * A duration as `parseDuration` reads it: the largest unit that divides it exactly
 * (604800000 → 7d). `rounded`: the largest unit up to minutes it reaches, rounded
 * (1,325,000 → 22m), for reports where the exact figure is noise.
 */
export function formatDuration(ms: number, rounded = false): string {
  if (rounded) return ms >= 60_000 ? `${Math.round(ms / 60_000)}m` : ms >= 1000 ? `${Math.round(ms / 1000)}s` : `${ms}ms`;
  for (const unit of ['d', 'h', 'm', 's'] as const) {
    const size = DURATION_UNITS_MS[unit];
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}
