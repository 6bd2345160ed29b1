import type { DatabaseFlags, NatsFlags, RetrySpanFlags } from '../cli/shared-options.js';

// What `ferry doctor` takes and reports, apart from its checks (doctor.ts: PostgreSQL and the
// relays; doctor-nats.ts: NATS, streams and consumers), which both use these.

export interface DoctorFlags extends DatabaseFlags, NatsFlags, RetrySpanFlags {
  stream?: string[];
  consumer?: string[];
  maxPayloadBytes: number;
  leaseTermMs: number;
  inboxMaxDeliver: number;
  bossSchema?: string;
  oldBossSchema?: string;
}

export const FINDING_STATUSES = ['ok', 'warning', 'problem', 'skipped'] as const;
export type FindingStatus = (typeof FINDING_STATUSES)[number];

/** One check's result; a `problem` counts towards the exit code, a `warning` does not. */
export interface Finding {
  check: string;
  status: FindingStatus;
  message: string;
  /** What to do about it (present for warnings and problems). */
  fix?: string;
}

/** The `--json` output of `ferry doctor`. */
export interface DoctorReport {
  problems: number;
  warnings: number;
  findings: Finding[];
}

/** Records one finding. */
export type Add = (check: string, status: FindingStatus, message: string, fix?: string) => void;
