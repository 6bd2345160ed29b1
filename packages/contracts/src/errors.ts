import { ERROR_CODES, FerryError, ValidationError } from '@ferry/core';

/** One validator issue: where in `data`, and what is wrong there. */
export interface ContractIssue {
  /** A path such as `items[2].sku`; empty for the value as a whole. */
  readonly path: string;
  readonly message: string;
}

/** `data` is not what the contract of its type and version accepts. Raised by `publish` before any SQL. Code `FERRY_INVALID`. */
export class ContractValidationError extends ValidationError {
  /** The event type. */
  readonly type: string;
  /** The contract version `data` was checked against. */
  readonly contractVersion: number;
  readonly issues: readonly ContractIssue[];
  constructor(field: string, type: string, contractVersion: number, issues: readonly ContractIssue[]) {
    super(field, `${field}: ${JSON.stringify(type)} v${contractVersion} refused the data: ${formatIssues(issues)}; nothing was written`);
    this.name = 'ContractValidationError';
    this.type = type;
    this.contractVersion = contractVersion;
    this.issues = issues;
  }
}

/**
 * A contract's validator threw instead of returning issues (a bug in the
 * validator or in a refinement): the event is neither written nor applied.
 * Code `FERRY_INVALID`.
 */
export class ContractValidatorError extends FerryError {
  readonly type: string;
  readonly contractVersion: number;
  constructor(type: string, contractVersion: number, cause: unknown) {
    super(
      ERROR_CODES.invalid,
      `the validator of ${JSON.stringify(type)} v${contractVersion} threw instead of returning issues: ${cause instanceof Error ? cause.message : String(cause)}; fix the schema (a refinement or transform that throws)`,
      { cause },
    );
    this.name = 'ContractValidatorError';
    this.type = type;
    this.contractVersion = contractVersion;
  }
}

/** Issues as one line: `total: Expected number; items[0].sku: Required`. At most 10, then how many more. */
export function formatIssues(issues: readonly ContractIssue[]): string {
  const shown = issues.slice(0, 10).map((i) => (i.path ? `${i.path}: ${i.message}` : i.message));
  if (issues.length > 10) shown.push(`and ${issues.length - 10} more`);
  return shown.join('; ');
}

export const isContractValidationError = (e: unknown): e is ContractValidationError => e instanceof ContractValidationError;
export const isContractValidatorError = (e: unknown): e is ContractValidatorError => e instanceof ContractValidatorError;
